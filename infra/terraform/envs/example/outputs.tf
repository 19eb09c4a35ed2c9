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
