# The worker's access to its data, the one policy document of every place a
# worker runs: the instance role (the iam module) and the Kubernetes pod
# role (the pod-role module) both grant exactly this. Queues it drains,
# audio it reads, transcripts, claims and error records it writes, the
# keys of those, and the model repository.

data "aws_partition" "current" {}

locals {
  model_bucket = var.model_repository_s3_uri == null ? null : regex("^s3://([^/]+)/(.*)$", var.model_repository_s3_uri)
}

data "aws_iam_policy_document" "this" {
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
}

# What KEDA's aws-sqs-queue scaler asks of the queues (the operator's own
# role, where KEDA is the identity owner).
data "aws_iam_policy_document" "scaler" {
  statement {
    sid       = "ReadQueueDepth"
    effect    = "Allow"
    actions   = ["sqs:GetQueueAttributes"]
    resources = var.queue_arns
  }
}
