# The work queues (live and bulk by default), each with its dead-letter
# queue after max_receive_count receives: encrypted (SQS's own key or the
# one given), with a visibility timeout derived from the worker's longest
# job.

locals {
  visibility_timeout = var.worker_max_job_seconds + var.visibility_margin_seconds
  kms                = var.kms_key_arn != null
}

resource "aws_sqs_queue" "dlq" {
  for_each = var.queues

  name                              = "${var.name_prefix}-${each.key}-dlq"
  message_retention_seconds         = var.dlq_message_retention_seconds
  sqs_managed_sse_enabled           = local.kms ? null : true
  kms_master_key_id                 = var.kms_key_arn
  kms_data_key_reuse_period_seconds = local.kms ? var.kms_data_key_reuse_period_seconds : null
  tags                              = merge(var.tags, { "fleetscribe:queue" = "${each.key}-dlq" })
}

resource "aws_sqs_queue" "main" {
  for_each = var.queues

  name                              = "${var.name_prefix}-${each.key}"
  visibility_timeout_seconds        = local.visibility_timeout
  message_retention_seconds         = var.message_retention_seconds
  receive_wait_time_seconds         = var.receive_wait_time_seconds
  sqs_managed_sse_enabled           = local.kms ? null : true
  kms_master_key_id                 = var.kms_key_arn
  kms_data_key_reuse_period_seconds = local.kms ? var.kms_data_key_reuse_period_seconds : null
  tags                              = merge(var.tags, { "fleetscribe:queue" = each.key })

  redrive_policy = jsonencode({
    deadLetterTargetArn = aws_sqs_queue.dlq[each.key].arn
    maxReceiveCount     = var.max_receive_count
  })

  lifecycle {
    precondition {
      condition     = local.visibility_timeout <= 43200
      error_message = "worker_max_job_seconds + visibility_margin_seconds exceeds the SQS maximum visibility timeout of 12 hours."
    }
  }
}

# Only the matching work queue may dead-letter into each DLQ.
resource "aws_sqs_queue_redrive_allow_policy" "dlq" {
  for_each = var.queues

  queue_url = aws_sqs_queue.dlq[each.key].id
  redrive_allow_policy = jsonencode({
    redrivePermission = "byQueue"
    sourceQueueArns   = [aws_sqs_queue.main[each.key].arn]
  })
}
