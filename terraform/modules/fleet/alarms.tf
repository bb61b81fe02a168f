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
