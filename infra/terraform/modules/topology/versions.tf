# Pure logic: no providers, resources or data sources, so `terraform validate` (and even
# `apply`) runs offline. Every other module reads its topic and replication layout from here.
terraform {
  required_version = ">= 1.5"
}
