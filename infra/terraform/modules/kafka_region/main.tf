data "aws_caller_identity" "current" {}
data "aws_region" "current" {}

# One customer-managed key per region encrypts broker volumes and broker logs.
resource "aws_kms_key" "kafka" {
  description         = "${var.name}: MSK storage and broker logs"
  enable_key_rotation = true
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        Sid       = "AccountAdmin"
        Effect    = "Allow"
        Principal = { AWS = "arn:aws:iam::${data.aws_caller_identity.current.account_id}:root" }
        Action    = "kms:*"
        Resource  = "*"
      },
      {
        Sid       = "CloudWatchLogs"
        Effect    = "Allow"
        Principal = { Service = "logs.${data.aws_region.current.name}.amazonaws.com" }
        Action    = ["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"]
        Resource  = "*"
      },
    ]
  })
  tags = var.tags
}

resource "aws_cloudwatch_log_group" "brokers" {
  name              = "/msk/${var.name}"
  retention_in_days = var.log_retention_days
  kms_key_id        = aws_kms_key.kafka.arn
  tags              = var.tags
}

resource "aws_security_group" "brokers" {
  name        = "${var.name}-msk"
  description = "MSK brokers of ${var.name}: IAM/TLS listener reachable from the VPC and peered VPCs only"
  vpc_id      = var.vpc_id
  tags        = var.tags

  ingress {
    description = "Kafka IAM over TLS from the VPC and peered regions (edges, maintenance units, MM2)"
    from_port   = 9098
    to_port     = 9098
    protocol    = "tcp"
    cidr_blocks = concat([var.vpc_cidr], var.peer_cidrs)
  }

  # MSK Connect workers of this region join this group and pull from the peer regions' brokers.
  egress {
    description = "Inter-broker traffic in the VPC; MM2 workers to peered regions' brokers"
    from_port   = 0
    to_port     = 65535
    protocol    = "tcp"
    cidr_blocks = concat([var.vpc_cidr], var.peer_cidrs)
  }
}

# Topics are created explicitly by modules/topics; auto-creation would hide typos and give
# wrong partition counts (index-ops must have exactly n_shards partitions).
resource "aws_msk_configuration" "kafka" {
  name           = "${var.name}-config"
  kafka_versions = [var.kafka_version]
  server_properties = join("\n", [
    "auto.create.topics.enable = false",
    "default.replication.factor = ${var.replication_factor}",
    "min.insync.replicas = ${var.min_insync_replicas}",
    "unclean.leader.election.enable = false",
    "log.cleaner.enable = true",
    # SCRAM clients get only what the roles' ACLs grant (modules/topics); IAM clients (MM2, the
    # Terraform kafka provider) are governed by IAM policies, not by Kafka ACLs.
    "allow.everyone.if.no.acl.found = false",
    "",
  ])
}

resource "aws_msk_cluster" "kafka" {
  cluster_name           = var.name
  kafka_version          = var.kafka_version
  number_of_broker_nodes = length(var.private_subnet_ids) * var.brokers_per_az
  enhanced_monitoring    = "PER_TOPIC_PER_PARTITION"
  tags                   = var.tags

  broker_node_group_info {
    instance_type   = var.broker_instance_type
    client_subnets  = var.private_subnet_ids
    security_groups = [aws_security_group.brokers.id]

    storage_info {
      ebs_storage_info {
        volume_size = var.broker_volume_gib
      }
    }

    connectivity_info {
      public_access {
        type = "DISABLED"
      }
    }
  }

  configuration_info {
    arn      = aws_msk_configuration.kafka.arn
    revision = aws_msk_configuration.kafka.latest_revision
  }

  client_authentication {
    unauthenticated = false
    sasl {
      iam   = true # MM2 on MSK Connect and the Terraform kafka provider
      scram = true # the project's own clients (confluent-kafka, aiokafka, Faust): port 9096
    }
  }

  encryption_info {
    encryption_at_rest_kms_key_arn = aws_kms_key.kafka.arn
    encryption_in_transit {
      client_broker = "TLS"
      in_cluster    = true
    }
  }

  logging_info {
    broker_logs {
      cloudwatch_logs {
        enabled   = true
        log_group = aws_cloudwatch_log_group.brokers.name
      }
    }
  }

  open_monitoring {
    prometheus {
      jmx_exporter {
        enabled_in_broker = true
      }
      node_exporter {
        enabled_in_broker = true
      }
    }
  }
}

# SCRAM credentials of the project's clients (wire/kafka_clients.py speaks SCRAM, not MSK IAM):
# one user per role, kvcompass-<role> (wire/acls.py), whose ACLs modules/topics declares. MSK
# reads them from Secrets Manager secrets named AmazonMSK_*, encrypted with a customer key.
resource "aws_secretsmanager_secret" "client" {
  #checkov:skip=CKV2_AWS_57:MSK SCRAM secrets are rotated by applying a new role password; MSK has no rotation Lambda
  for_each   = toset(var.roles)
  name       = "AmazonMSK_${var.name}-kvcompass-${each.key}"
  kms_key_id = aws_kms_key.kafka.arn
}

resource "aws_secretsmanager_secret_version" "client" {
  for_each  = toset(var.roles)
  secret_id = aws_secretsmanager_secret.client[each.key].id
  secret_string = jsonencode({
    username = "kvcompass-${each.key}"
    password = var.role_passwords[each.key]
  })
}

resource "aws_msk_scram_secret_association" "client" {
  cluster_arn     = aws_msk_cluster.kafka.arn
  secret_arn_list = [for r in var.roles : aws_secretsmanager_secret.client[r].arn]
  depends_on      = [aws_secretsmanager_secret_version.client]
}
