data "aws_partition" "current" {}
data "aws_region" "current" {}
data "aws_caller_identity" "current" {}

locals {
  asg_arn = "arn:${data.aws_partition.current.partition}:autoscaling:${data.aws_region.current.name}:${data.aws_caller_identity.current.account_id}:autoScalingGroup:*:autoScalingGroupName/${var.autoscaling_group_name}"
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

locals {
  model_bucket = var.model_repository_s3_uri == null ? null : regex("^s3://([^/]+)/(.*)$", var.model_repository_s3_uri)
}

data "aws_iam_policy_document" "worker" {
  dynamic "statement" {
    for_each = local.model_bucket == null ? [] : [1]
    content {
      sid       = "ReadModelRepository"
      effect    = "Allow"
      actions   = ["s3:GetObject"]
      resources = ["arn:${data.aws_partition.current.partition}:s3:::${local.model_bucket[0]}/${local.model_bucket[1]}*"]
    }
  }

  dynamic "statement" {
    for_each = local.model_bucket == null ? [] : [1]
    content {
      sid       = "ListModelRepository"
      effect    = "Allow"
      actions   = ["s3:ListBucket"]
      resources = ["arn:${data.aws_partition.current.partition}:s3:::${local.model_bucket[0]}"]
      condition {
        test     = "StringLike"
        variable = "s3:prefix"
        values   = ["${local.model_bucket[1]}*"]
      }
    }
  }

  statement {
    sid    = "DrainQueues"
    effect = "Allow"
    # ChangeMessageVisibilityBatch and DeleteMessageBatch are authorised by
    # the non-batch actions.
    actions = [
      "sqs:ReceiveMessage",
      "sqs:DeleteMessage",
      "sqs:ChangeMessageVisibility",
      "sqs:GetQueueAttributes",
      "sqs:GetQueueUrl",
    ]
    resources = var.queue_arns
  }

  statement {
    sid       = "ReadInputAudio"
    effect    = "Allow"
    actions   = ["s3:GetObject", "s3:GetObjectVersion"]
    resources = [for p in var.input_prefixes : "${var.input_bucket_arn}/${p}*"]
  }

  # Without ListBucket, S3 answers a HEAD of a missing key with 403 instead
  # of 404, and the worker could not tell a missing input (error record)
  # from a permissions fault (retry), nor a missing transcript from one it
  # may not read.
  statement {
    sid       = "ListInputPrefixes"
    effect    = "Allow"
    actions   = ["s3:ListBucket"]
    resources = [var.input_bucket_arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = [for p in var.input_prefixes : "${p}*"]
    }
  }

  statement {
    sid       = "WriteTranscripts"
    effect    = "Allow"
    actions   = ["s3:PutObject", "s3:PutObjectTagging", "s3:GetObject"]
    resources = ["${var.output_bucket_arn}/${var.output_prefix}*"]
  }

  # DeleteObject removes the worker's own short-lived objects only: its
  # in-progress claims and the provisional error record of a last attempt
  # that succeeded. Transcripts cannot be deleted with this role.
  statement {
    sid       = "RemoveClaimsAndProvisionalRecords"
    effect    = "Allow"
    actions   = ["s3:DeleteObject"]
    resources = ["${var.output_bucket_arn}/${var.output_prefix}*.claim", "${var.output_bucket_arn}/${var.output_prefix}*.error.json"]
  }

  statement {
    sid       = "ListOutputPrefix"
    effect    = "Allow"
    actions   = ["s3:ListBucket"]
    resources = [var.output_bucket_arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["${var.output_prefix}*"]
    }
  }

  dynamic "statement" {
    for_each = length(var.kms_key_arns) > 0 ? [1] : []
    content {
      sid       = "UseDataKeys"
      effect    = "Allow"
      actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
      resources = var.kms_key_arns
    }
  }

  # Objects of the model repository encrypted with their own key.
  dynamic "statement" {
    for_each = var.model_kms_key_arn == null ? [] : [1]
    content {
      sid       = "DecryptModelRepository"
      effect    = "Allow"
      actions   = ["kms:Decrypt"]
      resources = [var.model_kms_key_arn]
    }
  }

  statement {
    sid    = "DrainOnScaleIn"
    effect = "Allow"
    actions = [
      "autoscaling:CompleteLifecycleAction",
      "autoscaling:RecordLifecycleActionHeartbeat",
    ]
    resources = [local.asg_arn]
  }

  # The worker protects its own instance from scale-in while it holds jobs
  # (-scale-in-protection), and unprotects it when idle; the instance's
  # health check marks it unhealthy when its worker or Triton is down.
  statement {
    sid       = "ScaleInProtectionAndHealth"
    effect    = "Allow"
    actions   = ["autoscaling:SetInstanceProtection", "autoscaling:SetInstanceHealth"]
    resources = [local.asg_arn]
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

  # GetAuthorizationToken has no resource-level permissions: AWS requires "*".
  dynamic "statement" {
    for_each = length(var.ecr_repository_arns) > 0 ? [1] : []
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
# rules (the SSM agent is on the GPU AMI).
resource "aws_iam_role_policy_attachment" "session_manager" {
  count = var.session_manager ? 1 : 0

  role       = aws_iam_role.worker.name
  policy_arn = "arn:${data.aws_partition.current.partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"
}

resource "aws_iam_instance_profile" "worker" {
  name = var.name
  role = aws_iam_role.worker.name
  tags = var.tags
}
