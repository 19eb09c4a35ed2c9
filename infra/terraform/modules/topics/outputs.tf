output "topic_names" {
  description = "Names of the topics created in this region."
  value       = sort([for t in kafka_topic.topic : t.name])
}

output "acl_count" {
  description = "ACL bindings created in this region (one principal per role)."
  value       = length(kafka_acl.role)
}
