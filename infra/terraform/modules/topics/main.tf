# Only the local topics. The remote copies ("<source>.<topic>") are created by MirrorMaker 2,
# which copies partitions and (sync.topic.configs.enabled) the topic configs of the source.
resource "kafka_topic" "topic" {
  for_each = var.topics

  name               = each.value.name
  partitions         = each.value.partitions
  replication_factor = each.value.replication_factor
  config             = each.value.config
}
