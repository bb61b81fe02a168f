# The fleet's own alarms. Each stops an instance refresh (see the README:
# a stopped refresh leaves the group on the new version), and notifies alarm_actions.

# Boots that failed: the boot service publishes one BootFailures data
# point each time it abandons a launch (GPU mode, registry, image pull,
# model sync, MPS plan, the worker never ready, or the boot timeout). A
# single one fires it: a broken image or model is met again by every boot,
# and the group would otherwise relaunch into the same failure (an ABANDON
# loop) without anyone hearing of it.
#
# This alarm and never-in-service are the fleet's, and the canary's too
# while there is one (its group's, and "do not promote its version").
resource "aws_cloudwatch_metric_alarm" "boot_failures" {
  for_each            = local.alarm_groups
  alarm_name          = "${each.value.name}-boot-failures"
  alarm_description   = "An instance of ${each.value.what} failed to start its stack and was abandoned (its boot log is in the ${local.log_group} log group and the instance's console output)."
  namespace           = local.metric_ns
  metric_name         = "BootFailures"
  dimensions          = { AutoScalingGroupName = each.value.name }
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  threshold           = 1
  comparison_operator = "GreaterThanOrEqualToThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions
  tags                = var.tags
}

# Launches that fall short: desired capacity above what is in service or
# booting for launch_shortfall_minutes. Launches refused outright
# (insufficient capacity, a quota, an AMI or profile that does not exist)
# never boot, so only the group's own counts show them. Capacity metrics
# are GPUs in a weighted (spot) group and instances otherwise, as desired
# capacity is.
resource "aws_cloudwatch_metric_alarm" "launch_shortfall" {
  alarm_name          = "${var.name}-launch-shortfall"
  alarm_description   = "${var.name} has had less capacity in service or launching than desired for ${var.launch_shortfall_minutes} minutes: launches are failing (capacity, quota, AMI, instance profile) or being abandoned."
  comparison_operator = "GreaterThanOrEqualToThreshold"
  threshold           = 1
  evaluation_periods  = var.launch_shortfall_minutes
  datapoints_to_alarm = var.launch_shortfall_minutes
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions
  tags                = var.tags

  dynamic "metric_query" {
    for_each = { desired = "GroupDesiredCapacity", in_service = "GroupInServiceCapacity", pending = "GroupPendingCapacity" }
    content {
      id = metric_query.key
      metric {
        namespace   = "AWS/AutoScaling"
        metric_name = metric_query.value
        period      = 60
        stat        = "Average"
        dimensions  = { AutoScalingGroupName = var.name }
      }
    }
  }

  metric_query {
    id          = "short"
    expression  = "IF(desired > in_service + pending, 1, 0)"
    label       = "Desired capacity not in service or launching"
    return_data = true
  }
}

# Launches that never reach service: desired capacity above what is in
# service, and no capacity entering service, every minute for longer than a
# boot may take (boot_timeout_seconds) and launch_shortfall_minutes more.
# A long, healthy scale-out ramp has desired above in service throughout,
# but its boots end within the boot timeout, so capacity enters service in
# every such window and the alarm (which stops refreshes) stays quiet
# (metricmath_test.go's ramps). The first minute CloudWatch fetches has no
# minute before it to differ from: FILL counts it as none entering. An
# ABANDON loop always has a replacement
# launching, so the shortfall alarm (which counts launches) stays quiet;
# and a boot that dies before its start script (Docker broken on a new AMI,
# instance metadata down) publishes no boot failure. Only the group's own
# counts show those.
resource "aws_cloudwatch_metric_alarm" "never_in_service" {
  for_each            = local.alarm_groups
  alarm_name          = "${each.value.name}-never-in-service"
  alarm_description   = "${each.value.what} has had less capacity in service than desired, none entering service, for ${local.never_in_service_minutes} minutes, longer than a boot may take: launches are abandoned in a loop, or die before they start their stack (see the instances' console output)."
  comparison_operator = "GreaterThanOrEqualToThreshold"
  threshold           = 1
  evaluation_periods  = local.never_in_service_minutes
  datapoints_to_alarm = local.never_in_service_minutes
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions
  tags                = var.tags

  dynamic "metric_query" {
    for_each = { desired = "GroupDesiredCapacity", in_service = "GroupInServiceCapacity" }
    content {
      id = metric_query.key
      metric {
        namespace   = "AWS/AutoScaling"
        metric_name = metric_query.value
        period      = 60
        stat        = "Average"
        dimensions  = { AutoScalingGroupName = each.value.name }
      }
    }
  }

  metric_query {
    id          = "short"
    expression  = "IF(desired > in_service AND FILL(DIFF(in_service), 0) <= 0, 1, 0)"
    label       = "Desired capacity not in service, none entering"
    return_data = true
  }

  lifecycle {
    precondition {
      condition     = local.never_in_service_minutes <= 1440
      error_message = "boot_timeout_seconds plus launch_shortfall_minutes must be at most a day: the never-in-service alarm evaluates one-minute periods, and CloudWatch looks back one day at most."
    }
  }
}


moved {
  from = aws_cloudwatch_metric_alarm.boot_failures
  to   = aws_cloudwatch_metric_alarm.boot_failures["fleet"]
}

moved {
  from = aws_cloudwatch_metric_alarm.never_in_service
  to   = aws_cloudwatch_metric_alarm.never_in_service["fleet"]
}

# Jobs by group, from the workers' "job done" log lines in the fleet's log
# group (the worker puts its Auto Scaling group on every line): every job,
# and those that failed or will be retried. Bad input fails on the canary as
# on the fleet; only the canary's alarm compares the two.
resource "aws_cloudwatch_log_metric_filter" "jobs" {
  for_each       = local.job_metrics
  name           = "${var.name}-${each.value.metric}"
  log_group_name = aws_cloudwatch_log_group.this.name
  pattern        = each.value.pattern

  metric_transformation {
    name       = each.value.metric
    namespace  = local.metric_ns
    value      = "1"
    unit       = "Count"
    dimensions = { AutoScalingGroupName = "$.group" }
  }
}

# The canary fails more of its jobs than the fleet: both take jobs from the
# same queues, so a burst of bad input fails as large a share on each, and
# a new version that breaks work (a codec missing from the image, a model
# that loads but answers wrong shapes) fails a larger share on the canary
# alone. Shares are smoothed by one job (a group with none has a share of
# 0, and no division by zero); below min_jobs canary jobs in the window
# nothing is said.
resource "aws_cloudwatch_metric_alarm" "canary_job_failures" {
  count               = var.canary == null ? 0 : 1
  alarm_name          = "${local.canary_name}-job-failures"
  alarm_description   = "${local.alarm_groups.canary.what} failed or retried a share of its jobs more than ${var.canary.failure_margin} above the fleet's in 15 minutes (at least ${var.canary.min_jobs} jobs): the new version fails work the old one does. Its workers' \"job failed\" lines in ${local.log_group} give the error classes."
  comparison_operator = "GreaterThanOrEqualToThreshold"
  threshold           = 1
  evaluation_periods  = 1
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions
  tags                = var.tags

  dynamic "metric_query" {
    for_each = {
      cdone = { metric = "JobsDone", group = local.canary_name }, cfail = { metric = "JobsFailed", group = local.canary_name }
      fdone = { metric = "JobsDone", group = var.name }, ffail = { metric = "JobsFailed", group = var.name }
    }
    content {
      id = metric_query.key
      metric {
        namespace   = local.metric_ns
        metric_name = metric_query.value.metric
        period      = 900
        stat        = "Sum"
        dimensions  = { AutoScalingGroupName = metric_query.value.group }
      }
    }
  }

  metric_query {
    id          = "worse"
    expression  = "IF(FILL(cdone, 0) >= ${var.canary.min_jobs} AND FILL(cfail, 0) / (FILL(cdone, 0) + 1) - FILL(ffail, 0) / (FILL(fdone, 0) + 1) > ${var.canary.failure_margin}, 1, 0)"
    label       = "Canary's failed share above the fleet's by more than the margin"
    return_data = true
  }
}

# A message reached a dead-letter queue while the canary runs: whoever put
# it there (the canary's jobs or the fleet's), look before promoting. Each
# queue's count is carried over the minutes SQS reports nothing (an idle
# queue's metrics stop), so only a rise fires.
resource "aws_cloudwatch_metric_alarm" "canary_dead_letters" {
  count               = var.canary != null && length(var.dead_letter_queue_names) > 0 ? 1 : 0
  alarm_name          = "${local.canary_name}-dead-letters"
  alarm_description   = "A message reached a dead-letter queue (${join(", ", var.dead_letter_queue_names)}) while ${local.alarm_groups.canary.what} runs. Its error record (the output bucket's errors/ prefix) says which worker failed it and why; enqueue redrive moves it back after a fix."
  comparison_operator = "GreaterThanOrEqualToThreshold"
  threshold           = 1
  evaluation_periods  = 1
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions
  tags                = var.tags

  dynamic "metric_query" {
    for_each = { for i, q in var.dead_letter_queue_names : "d${i}" => q }
    content {
      id = metric_query.key
      metric {
        namespace   = "AWS/SQS"
        metric_name = "ApproximateNumberOfMessagesVisible"
        period      = 300
        stat        = "Maximum"
        dimensions  = { QueueName = metric_query.value }
      }
    }
  }

  metric_query {
    id          = "rise"
    expression  = "IF(FILL(DIFF(${join(" + ", [for i, q in var.dead_letter_queue_names : "FILL(d${i}, REPEAT)"])}), 0) > 0, 1, 0)"
    label       = "Messages added to the dead-letter queues"
    return_data = true
  }
}
