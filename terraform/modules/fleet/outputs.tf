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
  description = "ARN of the backlog-per-instance target tracking policy."
  value       = aws_autoscaling_policy.backlog_per_instance.arn
}
