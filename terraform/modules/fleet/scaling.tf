# Backlog per GPU = (weighted visible messages + messages being worked on)
#                   / desired GPUs
#   messages being worked on = in-flight messages (weighted), at most what
#   the desired GPUs can hold (jobs_per_gpu each): the rest of the
#   in-flight messages are parked in retry backoff, and a storm of failing
#   jobs must not scale the fleet out.
# Desired GPUs are the group's desired capacity where the group is weighted
# by GPUs (spot, mixed sizes), else desired instances times the one size's
# GPUs, so a fleet of 1-, 4- and 8-GPU instances scales on the work per
# GPU. Desired, not in service: capacity that is launching counts, so a
# backlog that a boot will serve does not add instances again every minute
# of the boot, and the metric has a value while the first instances boot. A queue's weight (queue_weights, default 1) scales its
# messages; a floor-capped queue (floor_capped_queues: the bulk queue)
# counts at most the daytime floor's worth outside the scheduled window, so
# a daytime backfill fills idle GPUs and the floor and never scales out.
# Target tracking holds it at backlog_per_gpu_target. It cannot act on an
# empty group (the division has no value at zero instances), so a step
# policy starts the first instances when weighted messages wait and the
# group's desired capacity is zero. That policy only ever adds capacity.

locals {
  weights = { for q in var.queue_names : q => lookup(var.queue_weights, q, 1) }
  # Queues of weight 0 take no part in scaling (and no metric slots).
  queue_ids = { for i, q in [for q in var.queue_names : q if local.weights[q] > 0] : q => i }
  term      = { for q, i in local.queue_ids : q => local.weights[q] == 1 ? "" : "${local.weights[q]} * " }
  # A floor-capped queue's visible messages: as weighted while the group's
  # minimum (GroupMinSize, in GPUs) is above min_gpus (the scheduled window
  # raised it), else at most what min_gpus GPUs hold at the target.
  floor_cap = var.min_gpus * var.backlog_per_gpu_target
  visible_terms = { for q, i in local.queue_ids : q => !contains(var.floor_capped_queues, q) ? "${local.term[q]}visible${i}" :
  "IF(minsize * ${local.capacity_unit} > ${var.min_gpus}, ${local.term[q]}visible${i}, IF(${local.term[q]}visible${i} < ${local.floor_cap}, ${local.term[q]}visible${i}, ${local.floor_cap}))" }
  visible_expr = join(" + ", [for q, i in local.queue_ids : local.visible_terms[q]])
  # What starts the fleet from zero: the queues that are not floor-capped
  # (a capped one waits for the window, whose floor starts the fleet).
  from_zero_expr = join(" + ", [for q, i in local.queue_ids : "${local.term[q]}visible${i}" if !contains(var.floor_capped_queues, q)])
  inflight_expr  = join(" + ", [for q, i in local.queue_ids : "${local.term[q]}inflight${i}"])
  gpus_expr      = "desired * ${local.capacity_unit}"
  cap_expr       = "${local.gpus_expr} * ${var.jobs_per_gpu}"
  per_gpu_expr   = "(${local.visible_expr} + IF(${local.inflight_expr} < ${local.cap_expr}, ${local.inflight_expr}, ${local.cap_expr})) / (${local.gpus_expr})"
}

resource "aws_autoscaling_policy" "backlog_per_gpu" {
  name                   = "${var.name}-backlog-per-gpu"
  autoscaling_group_name = aws_autoscaling_group.this.name
  policy_type            = "TargetTrackingScaling"

  lifecycle {
    precondition {
      condition     = length(local.queue_ids) > 0
      error_message = "queue_weights leaves no queue with a weight above 0: nothing would scale the fleet."
    }
    precondition {
      condition     = local.from_zero_expr != ""
      error_message = "floor_capped_queues caps every queue that scales the fleet: nothing would start it from zero outside the scheduled window."
    }
    precondition {
      condition     = length(var.floor_capped_queues) == 0 || 2 * length(local.queue_ids) + 3 <= 10
      error_message = "With floor_capped_queues the fleet takes at most 3 scaling queues: target tracking allows 10 metrics (two per queue, desired capacity, the group's minimum and the expression)."
    }
    precondition {
      condition     = alltrue([for q in var.floor_capped_queues : contains(var.queue_names, q)])
      error_message = "floor_capped_queues names a queue that is not in queue_names."
    }
  }

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
        id          = "desired"
        return_data = false
        metric_stat {
          stat = "Average"
          metric {
            namespace   = "AWS/AutoScaling"
            metric_name = "GroupDesiredCapacity"
            dimensions {
              name  = "AutoScalingGroupName"
              value = aws_autoscaling_group.this.name
            }
          }
        }
      }

      dynamic "metrics" {
        for_each = length(var.floor_capped_queues) > 0 ? [1] : []
        content {
          id          = "minsize"
          return_data = false
          metric_stat {
            stat = "Average"
            metric {
              namespace   = "AWS/AutoScaling"
              metric_name = "GroupMinSize"
              dimensions {
                name  = "AutoScalingGroupName"
                value = aws_autoscaling_group.this.name
              }
            }
          }
        }
      }

      metrics {
        id          = "backlog_per_gpu"
        label       = "Queue messages per desired GPU"
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

# Messages waiting and nothing desired, for three minutes in a row. Group
# metrics can arrive later than the queue's: a missing latest desired
# capacity repeats the last one reported (it is 0 only where the group
# never reported any), so a busy fleet is not scaled out on metric lag.
resource "aws_cloudwatch_metric_alarm" "scale_from_zero" {
  alarm_name          = "${var.name}-scale-from-zero"
  alarm_description   = "Messages are waiting and the group's desired capacity is zero."
  comparison_operator = "GreaterThanOrEqualToThreshold"
  threshold           = 1
  evaluation_periods  = 3
  datapoints_to_alarm = 3
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_autoscaling_policy.scale_from_zero.arn]

  dynamic "metric_query" {
    for_each = { for q, i in local.queue_ids : q => i if !contains(var.floor_capped_queues, q) }
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
    expression  = "IF((${local.from_zero_expr}) >= 1 AND FILL(FILL(desired, REPEAT), 0) == 0, 1, 0)"
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
  min_size               = ceil(each.value.min_gpus / local.capacity_unit)
  max_size               = ceil(each.value.max_gpus / local.capacity_unit)
  desired_capacity       = each.value.desired_gpus == null ? -1 : ceil(each.value.desired_gpus / local.capacity_unit)
}
