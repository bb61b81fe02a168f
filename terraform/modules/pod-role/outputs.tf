output "role_arn" {
  description = "The worker pods' role ARN."
  value       = aws_iam_role.this.arn
}

output "policy_json" {
  description = "The role's inline policy: the worker-policy module's, as the instance role grants it."
  value       = module.policy.json
}

output "scaler_policy_json" {
  description = "A policy for KEDA's operator role (scaling.identityOwner keda): sqs:GetQueueAttributes on the queues."
  value       = module.policy.scaler_json
}

output "service_account_annotations" {
  description = "The chart's serviceAccount.annotations for IRSA (empty with Pod Identity alone)."
  value       = var.oidc_provider_arn == null ? {} : { "eks.amazonaws.com/role-arn" = aws_iam_role.this.arn }
}
