# Two regions wired by hand because Terraform providers cannot be created with for_each.
# The topology module is the single source of truth for topics and replication flows.
provider "aws" {
  alias  = "us_east_1"
  region = "us-east-1"
}

provider "aws" {
  alias  = "eu_west_1"
  region = "eu-west-1"
}

module "topology" {
  source             = "../../modules/topology"
  regions            = var.regions
  n_shards           = var.n_shards
  workers_per_region = var.workers_per_region
}

module "kafka_us_east_1" {
  source             = "../../modules/kafka_region"
  providers          = { aws = aws.us_east_1 }
  name               = "kvcompass-us-east-1"
  vpc_id             = var.networks["us-east-1"].vpc_id
  vpc_cidr           = var.networks["us-east-1"].vpc_cidr
  private_subnet_ids = var.networks["us-east-1"].private_subnet_ids
  peer_cidrs         = [var.networks["eu-west-1"].vpc_cidr]
  role_passwords     = var.kafka_role_passwords
}

module "kafka_eu_west_1" {
  source             = "../../modules/kafka_region"
  providers          = { aws = aws.eu_west_1 }
  name               = "kvcompass-eu-west-1"
  vpc_id             = var.networks["eu-west-1"].vpc_id
  vpc_cidr           = var.networks["eu-west-1"].vpc_cidr
  private_subnet_ids = var.networks["eu-west-1"].private_subnet_ids
  peer_cidrs         = [var.networks["us-east-1"].vpc_cidr]
  role_passwords     = var.kafka_role_passwords
}

# The kafka providers depend on cluster outputs, so a first apply needs
# `-target=module.kafka_us_east_1 -target=module.kafka_eu_west_1` before the topics.
provider "kafka" {
  alias             = "us_east_1"
  bootstrap_servers = split(",", module.kafka_us_east_1.bootstrap_brokers_sasl_iam)
  tls_enabled       = true
  sasl_mechanism    = "aws-iam"
  sasl_aws_region   = "us-east-1"
}

provider "kafka" {
  alias             = "eu_west_1"
  bootstrap_servers = split(",", module.kafka_eu_west_1.bootstrap_brokers_sasl_iam)
  tls_enabled       = true
  sasl_mechanism    = "aws-iam"
  sasl_aws_region   = "eu-west-1"
}

module "topics_us_east_1" {
  source    = "../../modules/topics"
  providers = { kafka = kafka.us_east_1 }
  topics    = module.topology.topics_by_region["us-east-1"]
  acls      = module.topology.acls_by_region["us-east-1"]
}

module "topics_eu_west_1" {
  source    = "../../modules/topics"
  providers = { kafka = kafka.eu_west_1 }
  topics    = module.topology.topics_by_region["eu-west-1"]
  acls      = module.topology.acls_by_region["eu-west-1"]
}

locals {
  flows = { for f in module.topology.replication_flows : f.id => f }
}

# MM2 runs in the target region: eu-west-1 pulls from us-east-1 ...
module "mm2_us_east_1_to_eu_west_1" {
  source                   = "../../modules/replication"
  providers                = { aws = aws.eu_west_1 }
  depends_on               = [module.topics_us_east_1, module.topics_eu_west_1]
  flow                     = local.flows["us-east-1->eu-west-1"]
  source_bootstrap_servers = module.kafka_us_east_1.bootstrap_brokers_sasl_iam
  source_cluster_arn       = module.kafka_us_east_1.cluster_arn
  target_bootstrap_servers = module.kafka_eu_west_1.bootstrap_brokers_sasl_iam
  target_cluster_arn       = module.kafka_eu_west_1.cluster_arn
  subnet_ids               = var.networks["eu-west-1"].private_subnet_ids
  security_group_ids       = [module.kafka_eu_west_1.security_group_id]
  mm2_plugin_arn           = var.mm2_plugin_arns["eu-west-1"]
  kms_key_arn              = module.kafka_eu_west_1.kms_key_arn
}

# ... and us-east-1 pulls from eu-west-1.
module "mm2_eu_west_1_to_us_east_1" {
  source                   = "../../modules/replication"
  providers                = { aws = aws.us_east_1 }
  depends_on               = [module.topics_us_east_1, module.topics_eu_west_1]
  flow                     = local.flows["eu-west-1->us-east-1"]
  source_bootstrap_servers = module.kafka_eu_west_1.bootstrap_brokers_sasl_iam
  source_cluster_arn       = module.kafka_eu_west_1.cluster_arn
  target_bootstrap_servers = module.kafka_us_east_1.bootstrap_brokers_sasl_iam
  target_cluster_arn       = module.kafka_us_east_1.cluster_arn
  subnet_ids               = var.networks["us-east-1"].private_subnet_ids
  security_group_ids       = [module.kafka_us_east_1.security_group_id]
  mm2_plugin_arn           = var.mm2_plugin_arns["us-east-1"]
  kms_key_arn              = module.kafka_us_east_1.kms_key_arn
}
