# The caller passes a `kafka` provider configured for one regional cluster (IAM over TLS).
terraform {
  required_version = ">= 1.5"
  required_providers {
    kafka = {
      source  = "Mongey/kafka"
      version = ">= 0.7"
    }
  }
}
