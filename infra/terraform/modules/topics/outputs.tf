output "topic_names" {
  description = "Names of the topics created in this region."
  value       = sort([for t in kafka_topic.topic : t.name])
}
