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

output "bootstrap_brokers_sasl_scram" {
  description = "Comma-separated host:port list of the SCRAM/TLS listener (port 9096)."
  value       = aws_msk_cluster.kafka.bootstrap_brokers_sasl_scram
}

output "client_settings" {
  description = "Per role, the environment of a process of that role (wire/config.py PipelineConfig.from_env); its password is in client_secret_arns[role]. MSK's certificates chain to a public CA: no ssl_ca_location."
  value = {
    for r in var.roles : r => {
      KAFKA_BOOTSTRAP_SERVERS     = aws_msk_cluster.kafka.bootstrap_brokers_sasl_scram
      KVCOMPASS_SECURITY_PROTOCOL = "SASL_SSL"
      KVCOMPASS_SASL_MECHANISM    = "SCRAM-SHA-512"
      KVCOMPASS_SASL_USERNAME     = "kvcompass-${r}"
    }
  }
}

output "client_secret_arns" {
  description = "Per role, the Secrets Manager secret holding its SCRAM username and password."
  value       = { for r in var.roles : r => aws_secretsmanager_secret.client[r].arn }
}
