# Backlog per GPU = (visible + in-flight messages of every queue)
#                   / in-service GPUs
# In-service GPUs are the group's in-service capacity where the group is
# weighted by GPUs (spot, mixed sizes), else in-service instances times the
# one size's GPUs, so a fleet of 1-, 4- and 8-GPU instances scales on the
# work per GPU. Target tracking holds it at backlog_per_gpu_target. It cannot act on
# an empty group (the division has no value at zero instances), so a step
# policy starts the first instances when messages wait and the group's
# desired capacity is zero. That policy only ever adds capacity: a late or
# missing data point (filled as zero) can at worst add a few instances,
# which target tracking then removes, never shrink a busy fleet.

locals {
  queue_ids    = { for i, q in var.queue_names : q => i }
  backlog_expr = join(" + ", flatten([for q, i in local.queue_ids : ["visible${i}", "inflight${i}"]]))
  per_gpu_expr = "(${local.backlog_expr}) / (in_service * ${local.capacity_unit})"
}

resource "aws_autoscaling_policy" "backlog_per_gpu" {
  name                   = "${var.name}-backlog-per-gpu"
  autoscaling_group_name = aws_autoscaling_group.this.name
  policy_type            = "TargetTrackingScaling"

  target_tracking_configuration {
    target_value = var.backlog_per_gpu_target

    customized_metric_specification {
      dynamic "metrics" {
        for_each = local.queue_ids
        content {
          id          = "visible${metrics.value}"
          return_data = false
          metric_stat {
            stat = "Sum"
            metric {
              namespace   = "AWS/SQS"
              metric_name = "ApproximateNumberOfMessagesVisible"
              dimensions {
                name  = "QueueName"
                value = metrics.key
              }
            }
          }
        }
      }

      dynamic "metrics" {
        for_each = local.queue_ids
        content {
          id          = "inflight${metrics.value}"
          return_data = false
          metric_stat {
            stat = "Sum"
            metric {
              namespace   = "AWS/SQS"
              metric_name = "ApproximateNumberOfMessagesNotVisible"
              dimensions {
                name  = "QueueName"
                value = metrics.key
              }
            }
          }
        }
      }

      metrics {
        id          = "in_service"
        return_data = false
        metric_stat {
          stat = "Average"
          metric {
            namespace   = "AWS/AutoScaling"
            metric_name = var.spot.enabled ? "GroupInServiceCapacity" : "GroupInServiceInstances"
            dimensions {
              name  = "AutoScalingGroupName"
              value = aws_autoscaling_group.this.name
            }
          }
        }
      }

      metrics {
        id          = "backlog_per_gpu"
        label       = "Queue messages per in-service GPU"
        expression  = local.per_gpu_expr
        return_data = true
      }
    }
  }
}

resource "aws_autoscaling_policy" "scale_from_zero" {
  name                   = "${var.name}-scale-from-zero"
  autoscaling_group_name = aws_autoscaling_group.this.name
  policy_type            = "StepScaling"
  adjustment_type        = "ChangeInCapacity"
  # One step per new instance's warm-up: the alarm stays in ALARM until
  # desired capacity is reported above zero.
  estimated_instance_warmup = var.instance_warmup_seconds

  step_adjustment {
    metric_interval_lower_bound = 0
    scaling_adjustment          = ceil(var.scale_from_zero_capacity / local.capacity_unit)
  }
}

resource "aws_cloudwatch_metric_alarm" "scale_from_zero" {
  alarm_name          = "${var.name}-scale-from-zero"
  alarm_description   = "Messages are waiting and the group's desired capacity is zero."
  comparison_operator = "GreaterThanOrEqualToThreshold"
  threshold           = 1
  evaluation_periods  = 1
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_autoscaling_policy.scale_from_zero.arn]

  dynamic "metric_query" {
    for_each = local.queue_ids
    content {
      id = "visible${metric_query.value}"
      metric {
        namespace   = "AWS/SQS"
        metric_name = "ApproximateNumberOfMessagesVisible"
        period      = 60
        stat        = "Sum"
        dimensions = {
          QueueName = metric_query.key
        }
      }
    }
  }

  metric_query {
    id = "desired"
    metric {
      namespace   = "AWS/AutoScaling"
      metric_name = "GroupDesiredCapacity"
      period      = 60
      stat        = "Maximum"
      dimensions = {
        AutoScalingGroupName = aws_autoscaling_group.this.name
      }
    }
  }

  metric_query {
    id          = "waiting_with_nothing_desired"
    expression  = "IF((${join(" + ", [for q, i in local.queue_ids : "visible${i}"])}) > 0 AND FILL(desired, 0) == 0, 1, 0)"
    label       = "Messages waiting and desired capacity zero"
    return_data = true
  }
}

resource "aws_autoscaling_schedule" "this" {
  for_each = var.scheduled_scaling

  scheduled_action_name  = each.key
  autoscaling_group_name = aws_autoscaling_group.this.name
  recurrence             = each.value.recurrence
  time_zone              = each.value.time_zone
  min_size               = ceil(each.value.min_size / local.capacity_unit)
  max_size               = ceil(each.value.max_size / local.capacity_unit)
  desired_capacity       = each.value.desired_capacity == null ? -1 : ceil(each.value.desired_capacity / local.capacity_unit)
}
