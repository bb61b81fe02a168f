# The deployment's alarms on its queues and fleet: a message in a
# dead-letter queue, a queue's oldest message past its SLA, and messages
# waiting with no instance in service (scale-from-zero failed). Each
# notifies alarm_actions.

resource "aws_cloudwatch_metric_alarm" "dlq_not_empty" {
  for_each = var.dlq_names

  alarm_name          = "${var.name_prefix}-${each.key}-dlq-not-empty"
  alarm_description   = "Messages reached the ${each.key} dead-letter queue: jobs failed max-receives times. Their error records are next to where the transcripts would be."
  namespace           = "AWS/SQS"
  metric_name         = "ApproximateNumberOfMessagesVisible"
  dimensions          = { QueueName = each.value }
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 1
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions
  tags                = var.tags
}

resource "aws_cloudwatch_metric_alarm" "oldest_message" {
  for_each = var.queue_names

  alarm_name          = "${var.name_prefix}-${each.key}-oldest-message-over-sla"
  alarm_description   = "The oldest message in ${each.key} has waited longer than the SLA."
  namespace           = "AWS/SQS"
  metric_name         = "ApproximateAgeOfOldestMessage"
  dimensions          = { QueueName = each.value }
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 2
  threshold           = lookup(var.oldest_message_sla_seconds, each.key, var.default_oldest_message_sla_seconds)
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions
  tags                = var.tags
}

locals {
  # The queues whose waiting messages need an instance now.
  queue_ids = { for i, k in sort(setsubtract(keys(var.queue_names), var.wait_for_window)) : var.queue_names[k] => i }
}

resource "aws_cloudwatch_metric_alarm" "no_capacity" {
  alarm_name          = "${var.name_prefix}-backlog-without-instances"
  alarm_description   = "Messages are waiting and no worker instance has been in service for ${var.no_capacity_minutes} minutes."
  comparison_operator = "GreaterThanOrEqualToThreshold"
  threshold           = 1
  evaluation_periods  = var.no_capacity_minutes
  datapoints_to_alarm = var.no_capacity_minutes
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions
  tags                = var.tags

  dynamic "metric_query" {
    for_each = local.queue_ids
    content {
      id = "visible${metric_query.value}"
      metric {
        namespace   = "AWS/SQS"
        metric_name = "ApproximateNumberOfMessagesVisible"
        period      = 60
        stat        = "Sum"
        dimensions  = { QueueName = metric_query.key }
      }
    }
  }

  metric_query {
    id = "instances"
    metric {
      namespace   = "AWS/AutoScaling"
      metric_name = "GroupInServiceInstances"
      period      = 60
      stat        = "Average"
      dimensions  = { AutoScalingGroupName = var.autoscaling_group_name }
    }
  }

  lifecycle {
    precondition {
      condition     = alltrue([for k in var.wait_for_window : contains(keys(var.queue_names), k)])
      error_message = "wait_for_window names a queue key that is not in queue_names."
    }
  }

  metric_query {
    id          = "stalled"
    expression  = "IF((${join(" + ", [for q, i in local.queue_ids : "visible${i}"])}) > 0 AND FILL(instances, 0) == 0, 1, 0)"
    label       = "Backlog with no instance in service"
    return_data = true
  }
}
