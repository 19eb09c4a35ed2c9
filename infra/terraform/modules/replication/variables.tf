variable "flow" {
  description = "One entry of topology.replication_flows: {id, source, target, topics, remote_topics}."
  type = object({
    id            = string
    source        = string
    target        = string
    topics        = list(string)
    remote_topics = list(string)
  })
}

variable "source_bootstrap_servers" {
  description = "IAM/TLS bootstrap list of the source region's cluster (reachable from the target VPC)."
  type        = string
}

variable "source_cluster_arn" {
  description = "MSK ARN of the source cluster (read permissions)."
  type        = string
}

variable "target_bootstrap_servers" {
  description = "IAM/TLS bootstrap list of the target region's cluster; MSK Connect runs against it."
  type        = string
}

variable "target_cluster_arn" {
  description = "MSK ARN of the target cluster (write permissions)."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets of the target VPC for the MSK Connect workers."
  type        = list(string)
}

variable "security_group_ids" {
  description = "Security groups for the workers (the target brokers' group)."
  type        = list(string)
}

variable "mm2_plugin_arn" {
  description = "MSK Connect custom plugin holding Kafka's connect-mirror jars and aws-msk-iam-auth."
  type        = string
}

variable "mm2_plugin_revision" {
  description = "Revision of the custom plugin."
  type        = number
  default     = 1
}

variable "kafkaconnect_version" {
  description = "MSK Connect runtime version."
  type        = string
  default     = "3.7.x"
}

variable "mcu_count" {
  description = "MSK Connect units per worker."
  type        = number
  default     = 1
}

variable "worker_count" {
  description = "Provisioned MSK Connect workers."
  type        = number
  default     = 2
}

variable "tasks_max" {
  description = "MM2 tasks; up to the partition count of the replicated topics."
  type        = number
  default     = 4
}

variable "replication_factor" {
  description = "Replication factor of the remote topics and MM2's internal topics in the target."
  type        = number
  default     = 3
}

variable "kms_key_arn" {
  description = "Target region's key for the worker log group."
  type        = string
}

variable "log_retention_days" {
  description = "CloudWatch retention of worker logs."
  type        = number
  default     = 365
}

variable "tags" {
  description = "Tags for every resource."
  type        = map(string)
  default     = {}
}
