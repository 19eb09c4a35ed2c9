output "regions" {
  description = "Sorted, distinct region names."
  value       = local.regions
}

output "topic_specs" {
  description = "DESIGN section 7: every topic with key, partitions, topic config and producer hints."
  value       = local.topic_specs
}

output "topics_by_region" {
  description = "region => topic name => {name, partitions, replication_factor, config}."
  value       = local.topics_by_region
}

output "replication_flows" {
  description = "MM2 flows: one per ordered (source, target) pair of distinct regions."
  value       = local.replication_flows
}

output "mm2_properties" {
  description = "Dedicated-mode MirrorMaker 2 config for the full mesh (self-managed alternative)."
  value       = local.mm2_properties
}

output "roles" {
  description = "The Kafka roles; role r's SCRAM user and principal is kvcompass-<r> (wire/acls.py)."
  value       = local.roles
}

output "acls_by_region" {
  description = "region => the ALLOW bindings of every role ({role, resource, name, pattern, operation}); wire/acls.py grants() is the same table."
  value       = local.acls_by_region
}
