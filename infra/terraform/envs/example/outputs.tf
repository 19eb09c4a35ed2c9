output "topics_by_region" {
  description = "Topic layout per region (from the topology module)."
  value       = module.topology.topics_by_region
}

output "replication_flows" {
  description = "MM2 flows of the deployment."
  value       = module.topology.replication_flows
}

output "bootstrap_brokers" {
  description = "IAM/TLS bootstrap list per region."
  value = {
    "us-east-1" = module.kafka_us_east_1.bootstrap_brokers_sasl_iam
    "eu-west-1" = module.kafka_eu_west_1.bootstrap_brokers_sasl_iam
  }
}

output "client_settings" {
  description = "Per region and role, the environment of a process of that role (SASL_SSL, SCRAM-SHA-512); add KVCOMPASS_SASL_PASSWORD from client_secret_arns."
  value = {
    "us-east-1" = module.kafka_us_east_1.client_settings
    "eu-west-1" = module.kafka_eu_west_1.client_settings
  }
}

output "client_secret_arns" {
  description = "Per region and role, the Secrets Manager secret with that role's SCRAM credentials."
  value = {
    "us-east-1" = module.kafka_us_east_1.client_secret_arns
    "eu-west-1" = module.kafka_eu_west_1.client_secret_arns
  }
}
