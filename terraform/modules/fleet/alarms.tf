# The fleet's own alarms. Both stop (and roll back) an instance refresh,
# and notify alarm_actions.

# Boots that failed: the boot service publishes one BootFailures data
# point each time it abandons a launch (GPU mode, registry, image pull,
# model sync, MPS plan, the worker never ready, or the boot timeout). A
# single one fires it: a broken image or model is met again by every boot,
# and the group would otherwise relaunch into the same failure (an ABANDON
# loop) without anyone hearing of it.
resource "aws_cloudwatch_metric_alarm" "boot_failures" {
  alarm_name          = "${var.name}-boot-failures"
  alarm_description   = "An instance of ${var.name} failed to start its stack and was abandoned (its boot log is in the ${local.log_group} log group and the instance's console output)."
  namespace           = local.metric_ns
  metric_name         = "BootFailures"
  dimensions          = { AutoScalingGroupName = var.name }
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
