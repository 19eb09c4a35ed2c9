variable "name" {
  description = "Cluster name prefix, e.g. kvcompass-us-east-1."
  type        = string
}

variable "vpc_id" {
  description = "VPC holding the brokers."
  type        = string
}

variable "vpc_cidr" {
  description = "CIDR allowed to reach the brokers (edges, maintenance units, MSK Connect workers)."
  type        = string
}

variable "peer_cidrs" {
  description = "CIDRs of the other regions' VPCs: their MM2 workers pull from these brokers."
  type        = list(string)
  default     = []
}

variable "private_subnet_ids" {
  description = "One private subnet per availability zone; broker count is a multiple of this."
  type        = list(string)
}

variable "kafka_version" {
  description = "Apache Kafka version offered by MSK."
  type        = string
  default     = "3.7.x"
}

variable "broker_instance_type" {
  description = "MSK broker instance type."
  type        = string
  default     = "kafka.m7g.large"
}

variable "brokers_per_az" {
  description = "Brokers in each availability zone."
  type        = number
  default     = 1
}

variable "broker_volume_gib" {
  description = "EBS volume per broker."
  type        = number
  default     = 500
}

variable "replication_factor" {
  description = "default.replication.factor; the kvcompass topics also set it explicitly."
  type        = number
  default     = 3
}

variable "min_insync_replicas" {
  description = "min.insync.replicas default for topics created without it."
  type        = number
  default     = 2
}

variable "log_retention_days" {
  description = "CloudWatch retention of broker logs."
  type        = number
  default     = 365
}

variable "tags" {
  description = "Tags for every resource."
  type        = map(string)
  default     = {}
}

variable "roles" {
  description = "Kafka roles (wire/acls.py ROLES); role r's SCRAM user is kvcompass-<r>."
  type        = list(string)
  default     = ["sidecar", "maintenance", "edge", "admin"]
}

variable "role_passwords" {
  description = "SCRAM password of every role's user (kept in Secrets Manager; a process of that role reads it as KVCOMPASS_SASL_PASSWORD)."
  type        = map(string)
  sensitive   = true

  validation {
    condition     = alltrue([for pw in values(var.role_passwords) : length(pw) >= 16])
    error_message = "role_passwords: expected at least 16 characters each."
  }
}
