# S3 upload events to the live queue: the input bucket's notifications for
# the prefix and suffixes given, with the queue policy that lets S3
# deliver them.

data "aws_caller_identity" "current" {}

data "aws_iam_policy_document" "queue" {
  statement {
    sid       = "AllowBucketNotifications"
    effect    = "Allow"
    actions   = ["sqs:SendMessage"]
    resources = [var.queue_arn]
    principals {
      type        = "Service"
      identifiers = ["s3.amazonaws.com"]
    }
    condition {
      test     = "ArnEquals"
      variable = "aws:SourceArn"
      values   = [var.bucket_arn]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [data.aws_caller_identity.current.account_id]
    }
  }
}

resource "aws_sqs_queue_policy" "this" {
  queue_url = var.queue_url
  policy    = data.aws_iam_policy_document.queue.json
}

resource "aws_s3_bucket_notification" "this" {
  bucket = var.bucket_name

  dynamic "queue" {
    for_each = var.filter_suffixes
    content {
      id            = "fleetscribe-${queue.key}"
      queue_arn     = var.queue_arn
      events        = ["s3:ObjectCreated:*"]
      filter_prefix = var.filter_prefix
      filter_suffix = queue.value
    }
  }

  # S3 checks that it may send when the notification is created.
  depends_on = [aws_sqs_queue_policy.this]
}
