variable "topics" {
  description = "One region's entry of topology.topics_by_region: name => {name, partitions, replication_factor, config}."
  type = map(object({
    name               = string
    partitions         = number
    replication_factor = number
    config             = map(string)
  }))
}
