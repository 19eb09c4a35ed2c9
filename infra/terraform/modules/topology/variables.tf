variable "regions" {
  description = "Region names (e.g. AWS regions). One Kafka cluster per region; order is irrelevant."
  type        = list(string)

  validation {
    condition     = length(var.regions) >= 1 && length(distinct(var.regions)) == length(var.regions)
    error_message = "regions must be a non-empty list of distinct names."
  }
}

variable "n_shards" {
  description = "Index shards N: index-ops and index-patches get N partitions (partition = key mod N)."
  type        = number

  validation {
    condition     = var.n_shards >= 1 && floor(var.n_shards) == var.n_shards
    error_message = "n_shards must be a positive integer."
  }
}

variable "workers_per_region" {
  description = "kv-events is partitioned by worker id: one partition per worker slot in a region."
  type        = number
  default     = 16

  validation {
    condition     = var.workers_per_region >= 1 && floor(var.workers_per_region) == var.workers_per_region
    error_message = "workers_per_region must be a positive integer."
  }
}

variable "replication_factor" {
  description = "Replicas per partition inside one regional cluster (3 brokers over 3 AZs)."
  type        = number
  default     = 3
}

variable "min_insync_replicas" {
  description = "min.insync.replicas; producers use acks=all so one AZ may be lost without data loss."
  type        = number
  default     = 2
}

variable "few_partitions" {
  description = "Partition count of the 'few' topics (migrations, routing-decisions)."
  type        = number
  default     = 6
}

variable "retention_ms" {
  description = "Retention per retention class, in milliseconds."
  type = object({
    event_log = number # kv-events: the replayable event log
    short     = number # index-ops, migrations
    minutes   = number # queue-vectors
    hours     = number # routing-decisions
    long      = number # dead-letters
  })
  default = {
    event_log = 604800000  # 7 days
    short     = 3600000    # 1 hour
    minutes   = 600000     # 10 minutes
    hours     = 86400000   # 24 hours
    long      = 2592000000 # 30 days
  }
  validation {
    # pipeline's checkpoint rule (PipelineConfig: checkpoint_period_ms 60 s + checkpoint_margin_ms
    # 10 min): recovery replays the index-ops tail after the latest checkpoint.
    condition     = var.retention_ms.short > 60000 + 600000
    error_message = "retention_ms.short (index-ops) must exceed the checkpoint period plus its margin (660000 ms)."
  }
}

variable "event_log_retention_bytes" {
  description = "kv-events size bound per partition (time OR size, whichever is hit first)."
  type        = number
  default     = 10737418240 # 10 GiB
}

variable "replicated_topics" {
  description = "Topics MirrorMaker 2 copies from every region to every other region."
  type        = list(string)
  default     = ["index-patches", "queue-vectors", "migrations"]
}
