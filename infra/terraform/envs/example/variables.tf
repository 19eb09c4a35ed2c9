variable "regions" {
  description = "Regions of the deployment. This example wires providers for exactly these two (Terraform cannot for_each providers); add a block per extra region."
  type        = list(string)
  default     = ["us-east-1", "eu-west-1"]

  validation {
    condition     = length(setsubtract(toset(var.regions), toset(["us-east-1", "eu-west-1"]))) == 0 && length(var.regions) == 2
    error_message = "This example wires providers for us-east-1 and eu-west-1 only."
  }
}

variable "n_shards" {
  description = "Index shards: partitions of index-ops and index-patches."
  type        = number
  default     = 16
}

variable "workers_per_region" {
  description = "Worker slots per region: partitions of kv-events."
  type        = number
  default     = 16
}

variable "networks" {
  description = "Per region: VPC, its CIDR and one private subnet per AZ (VPCs peered or on a transit gateway)."
  type = map(object({
    vpc_id             = string
    vpc_cidr           = string
    private_subnet_ids = list(string)
  }))
}

variable "mm2_plugin_arns" {
  description = "Per region: MSK Connect custom plugin with connect-mirror and aws-msk-iam-auth."
  type        = map(string)
}

variable "kafka_role_passwords" {
  description = "SCRAM password of every role's user (sidecar, maintenance, edge, admin), the same in every region (TF_VAR_kafka_role_passwords='{sidecar=\"...\",...}')."
  type        = map(string)
  sensitive   = true
}
