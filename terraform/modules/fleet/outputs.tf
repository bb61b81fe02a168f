output "autoscaling_group_name" {
  description = "Name of the Auto Scaling group."
  value       = aws_autoscaling_group.this.name
}

output "autoscaling_group_arn" {
  description = "ARN of the Auto Scaling group."
  value       = aws_autoscaling_group.this.arn
}

output "launch_template_id" {
  description = "Launch template id."
  value       = aws_launch_template.this.id
}

output "lifecycle_hook_name" {
  description = "Termination lifecycle hook the drain service completes."
  value       = local.lifecycle_hook
}

output "backlog_policy_arn" {
  description = "ARN of the backlog-per-GPU target tracking policy."
  value       = aws_autoscaling_policy.backlog_per_gpu.arn
}

output "scale_from_zero_adjustment_type" {
  description = "How the scale-from-zero policy adjusts capacity (ChangeInCapacity: it only ever adds)."
  value       = aws_autoscaling_policy.scale_from_zero.adjustment_type
}

output "lifecycle_hooks" {
  description = "The launch and drain lifecycle hooks."
  value = {
    drain  = { name = aws_autoscaling_lifecycle_hook.drain["fleet"].name, heartbeat_timeout = aws_autoscaling_lifecycle_hook.drain["fleet"].heartbeat_timeout, default_result = aws_autoscaling_lifecycle_hook.drain["fleet"].default_result }
    launch = { name = aws_autoscaling_lifecycle_hook.launch["fleet"].name, heartbeat_timeout = aws_autoscaling_lifecycle_hook.launch["fleet"].heartbeat_timeout, default_result = aws_autoscaling_lifecycle_hook.launch["fleet"].default_result }
  }
}

output "user_data" {
  description = "The rendered instance bootstrap script (worker settings included; no secrets)."
  value       = local.user_data
}

output "user_data_bytes" {
  description = "Bytes of user data EC2 counts against its 16 KB limit (the script gzipped, as the launch template carries it)."
  value       = local.user_data_bytes
}

output "uses_mixed_instances_policy" {
  description = "Whether the group launches through a mixed instances policy weighted by GPUs (every fleet without a warm pool, spot or not)."
  value       = length(aws_autoscaling_group.this.mixed_instances_policy) > 0
}

output "warm_pool_state" {
  description = "State of warm pool instances, or null without a warm pool."
  value       = try(aws_autoscaling_group.this.warm_pool[0].pool_state, null)
}

output "schedule_names" {
  description = "Scheduled actions on the group."
  value       = keys(aws_autoscaling_schedule.this)
}

output "instance_weights" {
  description = "Capacity units (GPUs) of each instance type in the mixed instances group; empty with a warm pool."
  value = { for o in flatten([
    for mip in aws_autoscaling_group.this.mixed_instances_policy : [
      for lt in mip.launch_template : lt.override
    ]
  ]) : o.instance_type => o.weighted_capacity }
}

output "group_size" {
  description = "The group's min and max size as AWS counts them: GPUs (weighted), or instances with a warm pool."
  value       = { min = aws_autoscaling_group.this.min_size, max = aws_autoscaling_group.this.max_size }
}

output "capacity_metric" {
  description = "Auto Scaling metric the backlog is divided by: desired capacity (GPUs in a weighted group, instances otherwise)."
  value       = "GroupDesiredCapacity"
}

output "backlog_expression" {
  description = "Metric math the target tracking policy holds at backlog_per_gpu_target."
  value       = local.per_gpu_expr
}

output "log_group_name" {
  description = "CloudWatch Logs group of the instances' containers (give it to the iam module)."
  value       = aws_cloudwatch_log_group.this.name
}

output "metric_namespace" {
  description = "CloudWatch namespace of the instances' BootFailures metric (give it to the iam module)."
  value       = local.metric_ns
}

output "alarm_names" {
  description = "The fleet's own alarms (boot failures, launch shortfall), which also stop an instance refresh."
  value       = [aws_cloudwatch_metric_alarm.boot_failures["fleet"].alarm_name, aws_cloudwatch_metric_alarm.launch_shortfall.alarm_name]
}

output "instance_tags" {
  description = "Tags the launch template gives instances and volumes: the provider's default tags, tags and Name."
  value       = local.tags
}

output "launch_template_latest_version" {
  description = "The launch template's newest version: what an apply made, and what the group launches (see the README on a stopped refresh)."
  value       = aws_launch_template.this.latest_version
}

output "fleet_launch_template_version" {
  description = "The launch template version the fleet runs (launch_template_version, or the newest)."
  value       = local.fleet_version
}

output "canary" {
  description = "The canary's group and alarms (null without one): promote its version by setting launch_template_version to it once none of its alarms has fired and it has served."
  value = var.canary == null ? null : {
    autoscaling_group_name = aws_autoscaling_group.canary[0].name
    version                = var.canary.version
    alarm_names = concat([aws_cloudwatch_metric_alarm.boot_failures["canary"].alarm_name, aws_cloudwatch_metric_alarm.never_in_service["canary"].alarm_name, aws_cloudwatch_metric_alarm.canary_job_failures[0].alarm_name],
    aws_cloudwatch_metric_alarm.canary_dead_letters[*].alarm_name)
  }
}
