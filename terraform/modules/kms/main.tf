# One customer managed key for the buckets, the queues, the log group and
# (optionally) the instances' volumes, with the key policy statements each
# AWS service needs to use it. Without them the apply or the first launch
# fails: S3 cannot deliver (nor test) notifications to an encrypted queue,
# CloudWatch Logs refuses to create the log group, and Auto Scaling cannot
# launch an instance whose volume the key encrypts.

data "aws_partition" "current" {}
data "aws_region" "current" {}
data "aws_caller_identity" "current" {}

locals {
  p       = data.aws_partition.current.partition
  account = data.aws_caller_identity.current.account_id
  region  = data.aws_region.current.name
}

data "aws_iam_policy_document" "services" {
  statement {
    sid       = "S3NotificationsToEncryptedQueues"
    effect    = "Allow"
    actions   = ["kms:GenerateDataKey", "kms:Decrypt"]
    resources = ["*"] # in a key policy: this key
    principals {
      type        = "Service"
      identifiers = ["s3.amazonaws.com"]
    }
    condition {
      test     = "ArnEquals"
      variable = "aws:SourceArn"
      values   = [var.input_bucket_arn]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account]
    }
  }

  dynamic "statement" {
    for_each = var.log_group_name == null ? [] : [1]
    content {
      sid       = "LogsEncryptTheLogGroup"
      effect    = "Allow"
      actions   = ["kms:Encrypt", "kms:Decrypt", "kms:ReEncryptFrom", "kms:ReEncryptTo", "kms:GenerateDataKey", "kms:GenerateDataKeyWithoutPlaintext", "kms:DescribeKey"]
      resources = ["*"]
      principals {
        type        = "Service"
        identifiers = ["logs.${local.region}.amazonaws.com"]
      }
      condition {
        test     = "ArnEquals"
        variable = "kms:EncryptionContext:aws:logs:arn"
        values   = ["arn:${local.p}:logs:${local.region}:${local.account}:log-group:${var.log_group_name}"]
      }
    }
  }

  dynamic "statement" {
    for_each = var.encrypt_volumes ? [1] : []
    content {
      sid       = "AutoScalingEncryptsVolumes"
      effect    = "Allow"
      actions   = ["kms:Encrypt", "kms:Decrypt", "kms:ReEncryptFrom", "kms:ReEncryptTo", "kms:GenerateDataKey", "kms:GenerateDataKeyWithoutPlaintext", "kms:DescribeKey"]
      resources = ["*"]
      principals {
        type        = "AWS"
        identifiers = ["arn:${local.p}:iam::${local.account}:role/aws-service-role/autoscaling.amazonaws.com/AWSServiceRoleForAutoScaling"]
      }
    }
  }

  dynamic "statement" {
    for_each = var.encrypt_volumes ? [1] : []
    content {
      sid       = "AutoScalingGrantsToEC2"
      effect    = "Allow"
      actions   = ["kms:CreateGrant"]
      resources = ["*"]
      principals {
        type        = "AWS"
        identifiers = ["arn:${local.p}:iam::${local.account}:role/aws-service-role/autoscaling.amazonaws.com/AWSServiceRoleForAutoScaling"]
      }
      condition {
        test     = "Bool"
        variable = "kms:GrantIsForAWSResource"
        values   = ["true"]
      }
    }
  }
}

data "aws_iam_policy_document" "key" {
  # The account's own IAM policies decide who else may use the key (AWS's
  # default key policy): it grants nothing by itself, and without it the
  # key could not be managed at all.
  statement {
    sid       = "AccountIAMPolicies"
    effect    = "Allow"
    actions   = ["kms:*"]
    resources = ["*"]
    principals {
      type        = "AWS"
      identifiers = ["arn:${local.p}:iam::${local.account}:root"]
    }
  }

  source_policy_documents = [data.aws_iam_policy_document.services.json]
}

resource "aws_kms_key" "this" {
  count = var.create_key ? 1 : 0

  description             = "fleetscribe ${var.name}: audio, transcripts, queues and logs"
  enable_key_rotation     = true
  deletion_window_in_days = var.deletion_window_in_days
  policy                  = data.aws_iam_policy_document.key.json
  tags                    = var.tags
}

resource "aws_kms_alias" "this" {
  count = var.create_key ? 1 : 0

  name          = "alias/${var.name}"
  target_key_id = aws_kms_key.this[0].key_id
}
