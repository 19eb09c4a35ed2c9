output "connector_arn" {
  description = "ARN of the MM2 MirrorSourceConnector of this flow."
  value       = aws_mskconnect_connector.mm2.arn
}

output "remote_topics" {
  description = "Topic names the copies get in the target cluster (<source>.<topic>)."
  value       = var.flow.remote_topics
}
