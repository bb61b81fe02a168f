# The whole deployment in one apply: queues, buckets, upload
# notifications, a key, IAM, the GPU fleet and its alarms, with an alarms
# topic, a bulk window and the rollout's canary as options.

data "aws_partition" "current" {}

locals {
  asg_name      = "${var.name}-workers"
  output_prefix = "transcripts/"
  log_group     = "/fleetscribe/${local.asg_name}"
  # The supplied key, or the one module.kms creates with the statements S3,
  # CloudWatch Logs and Auto Scaling need.
  kms_key_arn = var.kms_key_arn != null ? var.kms_key_arn : module.kms.key_arn
}

# With kms_key_arn supplied nothing is created: merge the output
# kms_key_policy_statements into that key's policy before the apply.
module "kms" {
  source = "../../modules/kms"

  name             = var.name
  create_key       = var.kms_key_arn == null
  input_bucket_arn = "arn:${data.aws_partition.current.partition}:s3:::${var.input_bucket_name}"
  log_group_name   = local.log_group
  encrypt_volumes  = var.encrypt_volumes_with_kms_key
}

module "queues" {
  source = "../../modules/queues"

  name_prefix            = var.name
  queues                 = var.queues
  max_receive_count      = var.max_receive_count
  worker_max_job_seconds = var.max_job_seconds
  kms_key_arn            = local.kms_key_arn
}

module "buckets" {
  source = "../../modules/buckets"

  input_bucket_name  = var.input_bucket_name
  output_bucket_name = var.output_bucket_name
  output_prefix      = local.output_prefix
  create_kms_key     = false
  kms_key_arn        = local.kms_key_arn
}

module "notifications" {
  source = "../../modules/notifications"

  bucket_name     = module.buckets.input_bucket_name
  bucket_arn      = module.buckets.input_bucket_arn
  queue_arn       = module.queues.queue_arns["live"]
  queue_url       = module.queues.queue_urls["live"]
  filter_prefix   = var.upload_prefix
  filter_suffixes = var.upload_suffixes
}

module "iam" {
  source = "../../modules/iam"

  name                      = "${var.name}-worker"
  queue_arns                = values(module.queues.queue_arns)
  input_bucket_arn          = module.buckets.input_bucket_arn
  output_bucket_arn         = module.buckets.output_bucket_arn
  output_prefix             = local.output_prefix
  kms_key_arns              = [local.kms_key_arn]
  autoscaling_group_name    = local.asg_name
  ecr_repository_arns       = var.ecr_repository_arns
  ecr_pull_through_prefixes = var.ecr_pull_through_prefixes
  model_repository_s3_uri   = var.model_repository_s3_uri
  model_kms_key_arn         = var.model_kms_key_arn
  log_group_name            = local.log_group
  session_manager           = var.session_manager
}

resource "aws_security_group" "workers" {
  name        = "${var.name}-workers"
  description = "fleetscribe workers: no inbound, HTTPS out to AWS APIs and registries"
  vpc_id      = var.vpc_id

  egress {
    description = "HTTPS to SQS, S3, CloudWatch, Auto Scaling and image registries"
    from_port   = 443
    to_port     = 443
    protocol    = "tcp"
    cidr_blocks = ["0.0.0.0/0"]
  }
}

module "fleet" {
  source = "../../modules/fleet"

  name                   = local.asg_name
  subnet_ids             = var.private_subnet_ids
  security_group_ids     = [aws_security_group.workers.id]
  instance_profile_name  = module.iam.instance_profile_name
  instance_types         = var.instance_types
  max_gpus               = var.max_gpus
  queue_names            = values(module.queues.queue_names)
  backlog_per_gpu_target = var.backlog_per_gpu_target
  bulk_queue_url         = module.queues.queue_urls["bulk"]
  spot                   = var.spot
  warm_pool              = var.warm_pool
  job_timeout_seconds    = var.max_job_seconds
  ami_id                 = var.ami_id
  log_group_name         = local.log_group
  log_kms_key_arn        = local.kms_key_arn
  ebs_kms_key_arn        = var.encrypt_volumes_with_kms_key ? local.kms_key_arn : null
  alarm_actions          = local.alarm_topic_arns
  # A rollout that can be undone (README, "What rolls the fleet"): the
  # fleet on the pinned release, a canary on the new version beside it.
  launch_template_version = var.launch_template_version
  canary                  = var.canary
  dead_letter_queue_names = values(module.queues.dlq_names)
  # With the bulk window the bulk queue counts bulk_window.bulk_weight of
  # its messages: backfills fill idle GPUs and the window's floor.
  queue_weights = var.bulk_window.enabled ? { (module.queues.queue_names["bulk"]) = var.bulk_window.bulk_weight } : {}
  # Outside the window the bulk queue counts at most the daytime floor's
  # worth: a daytime backfill never scales the fleet out or starts it.
  floor_capped_queues = var.bulk_window.enabled ? [module.queues.queue_names["bulk"]] : []

  worker_environment = {
    FLEETSCRIBE_QUEUE_URL          = module.queues.queue_urls["live"]
    FLEETSCRIBE_INPUT_BUCKETS      = module.buckets.input_bucket_name
    FLEETSCRIBE_OUTPUT_BUCKET      = module.buckets.output_bucket_name
    FLEETSCRIBE_OUTPUT_PREFIX      = local.output_prefix
    FLEETSCRIBE_AWS_REGION         = var.region
    FLEETSCRIBE_MAX_RECEIVES       = tostring(module.queues.max_receive_count)
    FLEETSCRIBE_VISIBILITY_TIMEOUT = "2m"
    WORKER_IMAGE                   = var.worker_image
    TRITON_IMAGE                   = var.triton_image
    CUDA_IMAGE                     = var.cuda_image
    MODEL_S3_URI                   = var.model_repository_s3_uri
    MODEL_REPOSITORY               = "/opt/fleetscribe/models"
  }

  scheduled_scaling = var.bulk_window.enabled ? {
    "${var.name}-bulk-window-start" = {
      recurrence = var.bulk_window.start_cron
      min_gpus   = var.bulk_window.min_gpus
      max_gpus   = var.max_gpus
      time_zone  = var.bulk_window.time_zone
    }
    "${var.name}-bulk-window-end" = {
      recurrence = var.bulk_window.end_cron
      min_gpus   = 0 # the fleet's own floor
      max_gpus   = var.max_gpus
      time_zone  = var.bulk_window.time_zone
    }
  } : {}
}

module "alarms" {
  source = "../../modules/alarms"

  name_prefix            = var.name
  queue_names            = module.queues.queue_names
  dlq_names              = module.queues.dlq_names
  autoscaling_group_name = module.fleet.autoscaling_group_name
  alarm_actions          = local.alarm_topic_arns
  # A daytime backfill waits for the bulk window (its oldest-message alarm
  # still watches it).
  wait_for_window = var.bulk_window.enabled ? ["bulk"] : []
  oldest_message_sla_seconds = {
    live = 900
    bulk = 28800
  }
}

# Where the alarms go: the topics given, or one made here with an email
# subscriber.
resource "aws_sns_topic" "alarms" {
  count = length(var.alarm_topic_arns) == 0 ? 1 : 0

  name              = "${var.name}-alarms"
  kms_master_key_id = "alias/aws/sns"
}

resource "aws_sns_topic_subscription" "alarm_email" {
  count = length(aws_sns_topic.alarms) > 0 && var.alarm_email != null ? 1 : 0

  topic_arn = aws_sns_topic.alarms[0].arn
  protocol  = "email"
  endpoint  = var.alarm_email
}

locals {
  alarm_topic_arns = length(var.alarm_topic_arns) > 0 ? var.alarm_topic_arns : aws_sns_topic.alarms[*].arn
}
