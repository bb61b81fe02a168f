# The instance role and profile of the fleet: the worker's data access
# (the worker-policy module's document) plus what only an instance does:
# its own group's lifecycle hooks and health, its boot-failure metric, its
# containers' logs, image pulls, and Session Manager.

data "aws_partition" "current" {}
data "aws_region" "current" {}
data "aws_caller_identity" "current" {}

locals {
  ecr_repository = "arn:${data.aws_partition.current.partition}:ecr:${data.aws_region.current.name}:${data.aws_caller_identity.current.account_id}:repository"
  # The fleet's group and its canary's (the fleet module's NAME-canary):
  # both launch the same template, so their instances have this role.
  asg_arns = [for g in [var.autoscaling_group_name, "${var.autoscaling_group_name}-canary"] :
  "arn:${data.aws_partition.current.partition}:autoscaling:${data.aws_region.current.name}:${data.aws_caller_identity.current.account_id}:autoScalingGroup:*:autoScalingGroupName/${g}"]
}

data "aws_iam_policy_document" "assume" {
  statement {
    effect  = "Allow"
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

module "policy" {
  source = "../worker-policy"

  queue_arns              = var.queue_arns
  input_bucket_arn        = var.input_bucket_arn
  input_prefixes          = var.input_prefixes
  output_bucket_arn       = var.output_bucket_arn
  output_prefix           = var.output_prefix
  kms_key_arns            = var.kms_key_arns
  model_repository_s3_uri = var.model_repository_s3_uri
  model_kms_key_arn       = var.model_kms_key_arn
}

# The worker's data access (worker-policy), and what an instance of the
# Auto Scaling group does besides.
data "aws_iam_policy_document" "worker" {
  source_policy_documents = [module.policy.json]

  statement {
    sid    = "DrainOnScaleIn"
    effect = "Allow"
    actions = [
      "autoscaling:CompleteLifecycleAction",
      "autoscaling:RecordLifecycleActionHeartbeat",
    ]
    resources = local.asg_arns
  }

  # Which group this instance is in (the fleet's or its canary's): the
  # boot asks once. A read with no resource-level permissions.
  statement {
    sid       = "FindOwnGroup"
    effect    = "Allow"
    actions   = ["autoscaling:DescribeAutoScalingInstances"]
    resources = ["*"]
  }

  # A worker run with -scale-in-protection protects its own instance while
  # it holds jobs (the fleet module runs it without: scale-in drains); the
  # instance's health check marks it unhealthy when its worker or Triton is
  # down.
  statement {
    sid       = "ScaleInProtectionAndHealth"
    effect    = "Allow"
    actions   = ["autoscaling:SetInstanceProtection", "autoscaling:SetInstanceHealth"]
    resources = local.asg_arns
  }

  # A failed boot publishes one BootFailures data point (the fleet's
  # boot-failure alarm). PutMetricData has no resource-level permissions:
  # the condition keeps it to the fleet's namespace.
  statement {
    sid       = "PublishBootFailures"
    effect    = "Allow"
    actions   = ["cloudwatch:PutMetricData"]
    resources = ["*"]
    condition {
      test     = "StringEquals"
      variable = "cloudwatch:namespace"
      values   = [var.metric_namespace]
    }
  }

  # Docker's awslogs driver writes the containers' logs to the fleet's log
  # group (the group itself is the fleet module's).
  dynamic "statement" {
    for_each = var.log_group_name == null ? [] : [1]
    content {
      sid       = "ShipContainerLogs"
      effect    = "Allow"
      actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
      resources = ["arn:${data.aws_partition.current.partition}:logs:${data.aws_region.current.name}:${data.aws_caller_identity.current.account_id}:log-group:${var.log_group_name}:log-stream:*"]
    }
  }

  dynamic "statement" {
    for_each = length(var.ecr_repository_arns) > 0 ? [1] : []
    content {
      sid       = "PullImages"
      effect    = "Allow"
      actions   = ["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"]
      resources = var.ecr_repository_arns
    }
  }

  # An ECR pull-through cache rule's repositories: pulling a tag not cached
  # yet imports it from upstream, and the first pull of an image creates its
  # repository.
  dynamic "statement" {
    for_each = length(var.ecr_pull_through_prefixes) > 0 ? [1] : []
    content {
      sid       = "PullThroughCache"
      effect    = "Allow"
      actions   = ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:BatchImportUpstreamImage", "ecr:CreateRepository", "ecr:GetDownloadUrlForLayer"]
      resources = [for p in var.ecr_pull_through_prefixes : "${local.ecr_repository}/${trim(p, "/")}/*"]
    }
  }

  # GetAuthorizationToken has no resource-level permissions: AWS requires "*".
  dynamic "statement" {
    for_each = length(var.ecr_repository_arns) + length(var.ecr_pull_through_prefixes) > 0 ? [1] : []
    content {
      sid       = "EcrLogin"
      effect    = "Allow"
      actions   = ["ecr:GetAuthorizationToken"]
      resources = ["*"]
    }
  }
}

resource "aws_iam_role" "worker" {
  name                 = var.name
  assume_role_policy   = data.aws_iam_policy_document.assume.json
  permissions_boundary = var.permissions_boundary_arn
  tags                 = var.tags
}

resource "aws_iam_role_policy" "worker" {
  name   = "${var.name}-worker"
  role   = aws_iam_role.worker.id
  policy = data.aws_iam_policy_document.worker.json
}

# Session Manager: a shell on an instance without SSH, bastions or inbound
# rules (the SSM agent is on the GPU AMI). Its own permissions, not
# AmazonSSMManagedInstanceCore, which also lets anything on the host (every
# container) read every SSM parameter of the account and run documents:
# the agent registers the instance and opens the session's channels,
# nothing more.
data "aws_iam_policy_document" "session_manager" {
  statement {
    sid       = "RegisterInstance"
    effect    = "Allow"
    actions   = ["ssm:UpdateInstanceInformation"]
    resources = ["arn:${data.aws_partition.current.partition}:ec2:${data.aws_region.current.name}:${data.aws_caller_identity.current.account_id}:instance/*"]
  }
  # The session channels have no resource-level permissions: AWS requires "*".
  statement {
    sid       = "SessionChannels"
    effect    = "Allow"
    actions   = ["ssmmessages:CreateControlChannel", "ssmmessages:CreateDataChannel", "ssmmessages:OpenControlChannel", "ssmmessages:OpenDataChannel"]
    resources = ["*"]
  }
}

resource "aws_iam_role_policy" "session_manager" {
  count = var.session_manager ? 1 : 0

  name   = "${var.name}-session-manager"
  role   = aws_iam_role.worker.id
  policy = data.aws_iam_policy_document.session_manager.json
}

resource "aws_iam_instance_profile" "worker" {
  name = var.name
  role = aws_iam_role.worker.name
  tags = var.tags
}
