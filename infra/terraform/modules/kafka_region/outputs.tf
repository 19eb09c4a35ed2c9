output "cluster_arn" {
  description = "MSK cluster ARN."
  value       = aws_msk_cluster.kafka.arn
}

output "bootstrap_brokers_sasl_iam" {
  description = "Comma-separated host:port list of the IAM/TLS listener (port 9098)."
  value       = aws_msk_cluster.kafka.bootstrap_brokers_sasl_iam
}

output "security_group_id" {
  description = "Security group of the brokers (MSK Connect workers join it)."
  value       = aws_security_group.brokers.id
}

output "kms_key_arn" {
  description = "Customer-managed key of this region."
  value       = aws_kms_key.kafka.arn
}
