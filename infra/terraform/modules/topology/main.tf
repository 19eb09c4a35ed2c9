locals {
  regions = sort(distinct(var.regions))

  # DESIGN.md section 7. Keys are topic names; `partitions` and `config` go to the kafka provider
  # unchanged; `producer` holds client-side settings the topic cannot enforce (documented only).
  topic_specs = {
    "kv-events" = {
      key        = "worker id"
      partitions = var.workers_per_region
      config = {
        "cleanup.policy"      = "delete"
        "retention.ms"        = tostring(var.retention_ms.event_log)
        "retention.bytes"     = tostring(var.event_log_retention_bytes)
        "min.insync.replicas" = tostring(var.min_insync_replicas)
      }
      producer = {}
    }
    "index-ops" = {
      key        = "63-bit key (partition = key mod n_shards)"
      partitions = var.n_shards
      config = {
        "cleanup.policy"      = "delete"
        "retention.ms"        = tostring(var.retention_ms.short)
        "min.insync.replicas" = tostring(var.min_insync_replicas)
      }
      producer = {}
    }
    "index-patches" = {
      key        = "(table, shard, epoch, kind, index)"
      partitions = var.n_shards
      # Compacted: the latest image of every bucket/word survives, so a reader starting from
      # offset 0 rebuilds the whole view, and a replica fed by MM2 converges to the same view.
      config = {
        "cleanup.policy"            = "compact"
        "min.compaction.lag.ms"     = "0"
        "delete.retention.ms"       = "86400000"
        "min.cleanable.dirty.ratio" = "0.1"
        "segment.ms"                = "3600000"
        "min.insync.replicas"       = tostring(var.min_insync_replicas)
      }
      producer = {}
    }
    "index-snapshots" = {
      key        = "C + shard + snapshot id + chunk, or M + shard (partition = shard)"
      partitions = var.n_shards
      # Checkpoints of the maintenance units (pipeline.checkpoint): compaction keeps each shard's
      # latest manifest and the chunks of the latest two checkpoints. Recovery replays the
      # index-ops tail after the latest checkpoint, so index-ops retention (retention_ms.short)
      # must exceed the checkpoint period plus its margin (60 s + 10 min by default): the
      # validation of retention_ms enforces it.
      config = {
        "cleanup.policy"            = "compact"
        "min.cleanable.dirty.ratio" = "0.2"
        "segment.ms"                = "600000"
        "min.insync.replicas"       = tostring(var.min_insync_replicas)
      }
      producer = {}
    }
    "queue-vectors" = {
      key        = "region"
      partitions = length(local.regions)
      config = {
        "cleanup.policy"      = "delete"
        "retention.ms"        = tostring(var.retention_ms.minutes)
        "compression.type"    = "uncompressed"
        "min.insync.replicas" = tostring(var.min_insync_replicas)
      }
      producer = { "linger.ms" = "0", "compression.type" = "none" }
    }
    "migrations" = {
      key        = "prefix family"
      partitions = var.few_partitions
      config = {
        "cleanup.policy"      = "delete"
        "retention.ms"        = tostring(var.retention_ms.short)
        "min.insync.replicas" = tostring(var.min_insync_replicas)
      }
      producer = {}
    }
    "routing-decisions" = {
      key        = "request id"
      partitions = var.few_partitions
      config = {
        "cleanup.policy"      = "delete"
        "retention.ms"        = tostring(var.retention_ms.hours)
        "min.insync.replicas" = tostring(var.min_insync_replicas)
      }
      producer = {}
    }
    "dead-letters" = {
      key        = "original topic"
      partitions = 1
      config = {
        "cleanup.policy"      = "delete"
        "retention.ms"        = tostring(var.retention_ms.long)
        "min.insync.replicas" = tostring(var.min_insync_replicas)
      }
      producer = {}
    }
  }

  # Every region runs the same topic set on its own cluster.
  topics_by_region = {
    for region in local.regions : region => {
      for name, spec in local.topic_specs : name => {
        name               = name
        partitions         = spec.partitions
        replication_factor = var.replication_factor
        config             = spec.config
      }
    }
  }

  # A full mesh of MM2 flows: every region's replicated topics go to every other region.
  # MM2's DefaultReplicationPolicy names the copy "<source alias>.<topic>", so flows in opposite
  # directions never loop and a consumer tells local from remote records by the topic name.
  replication_flows = flatten([
    for source in local.regions : [
      for target in local.regions : {
        id            = "${source}->${target}"
        source        = source
        target        = target
        topics        = var.replicated_topics
        remote_topics = [for t in var.replicated_topics : "${source}.${t}"]
      } if target != source
    ]
  ])

  # Self-managed alternative to MSK Connect: one dedicated-mode MM2 config for the whole mesh
  # (`connect-mirror-maker.sh mm2.properties`). Bootstrap servers are placeholders to fill in.
  mm2_properties = join("\n", concat(
    ["clusters = ${join(", ", local.regions)}"],
    [for r in local.regions : "${r}.bootstrap.servers = <bootstrap-${r}>"],
    flatten([for f in local.replication_flows : [
      "${f.source}->${f.target}.enabled = true",
      "${f.source}->${f.target}.topics = ${join(",", f.topics)}",
    ]]),
    [
      "replication.policy.class = org.apache.kafka.connect.mirror.DefaultReplicationPolicy",
      "replication.factor = ${var.replication_factor}",
      "sync.topic.configs.enabled = true",
      "sync.topic.acls.enabled = false",
      "emit.checkpoints.enabled = false",
      "emit.heartbeats.enabled = true",
      "refresh.topics.interval.seconds = 60",
      "offset-syncs.topic.replication.factor = ${var.replication_factor}",
      "heartbeats.topic.replication.factor = ${var.replication_factor}",
      "checkpoints.topic.replication.factor = ${var.replication_factor}",
      "",
    ],
  ))

  # One Kafka principal per role (wire/acls.py grants(), the same table; tests/integration/
  # test_terraform.py compares the two): each role writes only the topics section 7 names it the
  # producer of, reads what it consumes (the local topic and the MM2 copies "<source>.<topic>"),
  # and may DESCRIBE / DESCRIBE_CONFIGS every topic (the processes verify them at start). Topics
  # and ACLs themselves are the admin's (here: Terraform over IAM, which Kafka ACLs do not bind).
  roles = ["sidecar", "maintenance", "edge", "admin"]
  acl_copies = {
    for r in local.regions : r => {
      for t in var.replicated_topics : t => concat([t], [for s in local.regions : "${s}.${t}" if s != r])
    }
  }
  acls_by_region = {
    for r in local.regions : r => distinct(concat(
      flatten([for role in ["sidecar", "maintenance", "edge"] : concat(
        [for t in keys(local.topic_specs) : { role = role, resource = "topic", name = t, pattern = "literal", operation = "DESCRIBE" }],
        [for t in keys(local.topic_specs) : { role = role, resource = "topic", name = t, pattern = "literal", operation = "DESCRIBE_CONFIGS" }],
        [{ role = role, resource = "topic", name = "dead-letters", pattern = "literal", operation = "WRITE" }],
      )]),
      [for t in ["kv-events", "queue-vectors"] : { role = "sidecar", resource = "topic", name = t, pattern = "literal", operation = "WRITE" }],
      flatten([for op in ["READ", "DESCRIBE"] : [
        for t in local.acl_copies[r]["migrations"] : { role = "sidecar", resource = "topic", name = t, pattern = "literal", operation = op }
      ]]),
      [{ role = "sidecar", resource = "group", name = "kvcompass-migrate-", pattern = "prefixed", operation = "READ" }],
      [for t in ["index-ops", "index-patches", "index-snapshots"] : { role = "maintenance", resource = "topic", name = t, pattern = "literal", operation = "WRITE" }],
      [for t in ["kv-events", "index-ops", "index-patches", "index-snapshots"] : { role = "maintenance", resource = "topic", name = t, pattern = "literal", operation = "READ" }],
      [{ role = "maintenance", resource = "topic", name = "kvcompass-pipeline-", pattern = "prefixed", operation = "ALL" }],
      [{ role = "maintenance", resource = "group", name = "kvcompass-pipeline", pattern = "prefixed", operation = "READ" }],
      [for g in ["kvcompass-recovery", "kvcompass-heal"] : { role = "maintenance", resource = "group", name = g, pattern = "literal", operation = "READ" }],
      [for t in ["queue-vectors", "migrations", "routing-decisions"] : { role = "edge", resource = "topic", name = t, pattern = "literal", operation = "WRITE" }],
      flatten([for op in ["READ", "DESCRIBE"] : [
        for t in concat(local.acl_copies[r]["index-patches"], local.acl_copies[r]["queue-vectors"]) : { role = "edge", resource = "topic", name = t, pattern = "literal", operation = op }
      ]]),
      [for g in ["kvcompass-edge-", "kvcompass-watch-", "kvcompass-view-"] : { role = "edge", resource = "group", name = g, pattern = "prefixed", operation = "READ" }],
      [
        { role = "admin", resource = "cluster", name = "kafka-cluster", pattern = "literal", operation = "ALL" },
        { role = "admin", resource = "topic", name = "*", pattern = "literal", operation = "ALL" },
        { role = "admin", resource = "group", name = "*", pattern = "literal", operation = "ALL" },
      ],
    ))
  }
}
