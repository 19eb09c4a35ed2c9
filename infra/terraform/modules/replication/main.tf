# One MirrorSourceConnector per (source, target) flow, running in the TARGET region: MM2 pulls
# across the WAN and produces locally, so a WAN partition stalls only the copy, never the local
# producers, and the copy resumes from its committed offsets once the link is back.
locals {
  name = "kvcompass-mm2-${var.flow.source}-to-${var.flow.target}"

  iam_client = {
    "security.protocol"                  = "SASL_SSL"
    "sasl.mechanism"                     = "AWS_MSK_IAM"
    "sasl.jaas.config"                   = "software.amazon.msk.auth.iam.IAMLoginModule required;"
    "sasl.client.callback.handler.class" = "software.amazon.msk.auth.iam.IAMClientCallbackHandler"
  }

  connector_configuration = merge(
    {
      "connector.class"                       = "org.apache.kafka.connect.mirror.MirrorSourceConnector"
      "tasks.max"                             = tostring(var.tasks_max)
      "source.cluster.alias"                  = var.flow.source
      "target.cluster.alias"                  = var.flow.target
      "source.cluster.bootstrap.servers"      = var.source_bootstrap_servers
      "target.cluster.bootstrap.servers"      = var.target_bootstrap_servers
      "topics"                                = join(",", var.flow.topics)
      "replication.policy.class"              = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"
      "replication.factor"                    = tostring(var.replication_factor)
      "offset-syncs.topic.replication.factor" = tostring(var.replication_factor)
      "sync.topic.configs.enabled"            = "true"
      "sync.topic.acls.enabled"               = "false"
      "refresh.topics.interval.seconds"       = "60"
      "key.converter"                         = "org.apache.kafka.connect.converters.ByteArrayConverter"
      "value.converter"                       = "org.apache.kafka.connect.converters.ByteArrayConverter"
      "header.converter"                      = "org.apache.kafka.connect.converters.ByteArrayConverter"
    },
    { for k, v in local.iam_client : "source.cluster.${k}" => v },
    { for k, v in local.iam_client : "target.cluster.${k}" => v },
  )

  # arn:aws:kafka:<region>:<acct>:cluster/<name>/<uuid> -> topic/ and group/ ARNs of that cluster.
  source_topics_arn = "${replace(var.source_cluster_arn, ":cluster/", ":topic/")}/*"
  source_groups_arn = "${replace(var.source_cluster_arn, ":cluster/", ":group/")}/*"
  target_topics_arn = "${replace(var.target_cluster_arn, ":cluster/", ":topic/")}/*"
  target_groups_arn = "${replace(var.target_cluster_arn, ":cluster/", ":group/")}/*"
}

resource "aws_iam_role" "mm2" {
  name = local.name
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Principal = { Service = "kafkaconnect.amazonaws.com" }
      Action    = "sts:AssumeRole"
    }]
  })
  tags = var.tags
}

resource "aws_iam_role_policy" "mm2" {
  name = local.name
  role = aws_iam_role.mm2.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        Sid      = "ReadSource"
        Effect   = "Allow"
        Action   = ["kafka-cluster:Connect", "kafka-cluster:DescribeCluster", "kafka-cluster:DescribeTopic", "kafka-cluster:DescribeTopicDynamicConfiguration", "kafka-cluster:ReadData", "kafka-cluster:DescribeGroup", "kafka-cluster:AlterGroup"]
        Resource = [var.source_cluster_arn, local.source_topics_arn, local.source_groups_arn]
      },
      {
        Sid      = "WriteTarget"
        Effect   = "Allow"
        Action   = ["kafka-cluster:Connect", "kafka-cluster:DescribeCluster", "kafka-cluster:CreateTopic", "kafka-cluster:DescribeTopic", "kafka-cluster:AlterTopic", "kafka-cluster:DescribeTopicDynamicConfiguration", "kafka-cluster:AlterTopicDynamicConfiguration", "kafka-cluster:WriteData", "kafka-cluster:ReadData", "kafka-cluster:DescribeGroup", "kafka-cluster:AlterGroup"]
        Resource = [var.target_cluster_arn, local.target_topics_arn, local.target_groups_arn]
      },
    ]
  })
}

resource "aws_cloudwatch_log_group" "mm2" {
  name              = "/msk-connect/${local.name}"
  retention_in_days = var.log_retention_days
  kms_key_id        = var.kms_key_arn
  tags              = var.tags
}

resource "aws_mskconnect_connector" "mm2" {
  name                       = local.name
  kafkaconnect_version       = var.kafkaconnect_version
  service_execution_role_arn = aws_iam_role.mm2.arn
  connector_configuration    = local.connector_configuration

  capacity {
    provisioned_capacity {
      mcu_count    = var.mcu_count
      worker_count = var.worker_count
    }
  }

  kafka_cluster {
    apache_kafka_cluster {
      bootstrap_servers = var.target_bootstrap_servers
      vpc {
        subnets         = var.subnet_ids
        security_groups = var.security_group_ids
      }
    }
  }

  kafka_cluster_client_authentication {
    authentication_type = "IAM"
  }

  kafka_cluster_encryption_in_transit {
    encryption_type = "TLS"
  }

  plugin {
    custom_plugin {
      arn      = var.mm2_plugin_arn
      revision = var.mm2_plugin_revision
    }
  }

  log_delivery {
    worker_log_delivery {
      cloudwatch_logs {
        enabled   = true
        log_group = aws_cloudwatch_log_group.mm2.name
      }
    }
  }
}
