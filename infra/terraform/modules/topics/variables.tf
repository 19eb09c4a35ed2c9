variable "topics" {
  description = "One region's entry of topology.topics_by_region: name => {name, partitions, replication_factor, config}."
  type = map(object({
    name               = string
    partitions         = number
    replication_factor = number
    config             = map(string)
  }))
}

variable "acls" {
  description = "One region's entry of topology.acls_by_region: the ALLOW bindings of every role."
  type = list(object({
    role      = string
    resource  = string
    name      = string
    pattern   = string
    operation = string
  }))
  default = []
}
