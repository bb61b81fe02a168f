output "role_arn" {
  description = "Worker instance role ARN."
  value       = aws_iam_role.worker.arn
}

output "role_name" {
  description = "Worker instance role name."
  value       = aws_iam_role.worker.name
}

output "instance_profile_name" {
  description = "Instance profile for the launch template."
  value       = aws_iam_instance_profile.worker.name
}

output "instance_profile_arn" {
  description = "Instance profile ARN."
  value       = aws_iam_instance_profile.worker.arn
}

output "worker_policy_json" {
  description = "The worker role's inline policy."
  value       = data.aws_iam_policy_document.worker.json
}
