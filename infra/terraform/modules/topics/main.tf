# Only the local topics. The remote copies ("<source>.<topic>") are created by MirrorMaker 2,
# which copies partitions and (sync.topic.configs.enabled) the topic configs of the source.
resource "kafka_topic" "topic" {
  for_each = var.topics

  name               = each.value.name
  partitions         = each.value.partitions
  replication_factor = each.value.replication_factor
  config             = each.value.config
}

# One principal per role and its ACLs (topology.acls_by_region, the same table as wire/acls.py):
# each role writes only its own topics. The SCRAM users are kafka_region's (kvcompass-<role>);
# MSK's allow.everyone.if.no.acl.found=false makes everything not granted here a refusal.
locals {
  acl_resource = { topic = "Topic", group = "Group", cluster = "Cluster" }
  acl_pattern  = { literal = "Literal", prefixed = "Prefixed" }
  acl_operation = {
    READ             = "Read"
    WRITE            = "Write"
    DESCRIBE         = "Describe"
    DESCRIBE_CONFIGS = "DescribeConfigs"
    CREATE           = "Create"
    ALL              = "All"
  }
  acls = { for a in var.acls : "${a.role}|${a.resource}|${a.name}|${a.pattern}|${a.operation}" => a }
}

resource "kafka_acl" "role" {
  for_each = local.acls

  resource_name                = each.value.name
  resource_type                = local.acl_resource[each.value.resource]
  resource_pattern_type_filter = local.acl_pattern[each.value.pattern]
  acl_principal                = "User:kvcompass-${each.value.role}"
  acl_host                     = "*"
  acl_operation                = local.acl_operation[each.value.operation]
  acl_permission_type          = "Allow"
}
