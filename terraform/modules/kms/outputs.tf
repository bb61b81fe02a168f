output "key_arn" {
  description = "ARN of the key created, or null with create_key = false."
  value       = try(aws_kms_key.this[0].arn, null)
}

output "policy_json" {
  description = "The key policy (the account's IAM policies, and the services' statements)."
  value       = data.aws_iam_policy_document.key.json
}

output "service_statements_json" {
  description = "The statements AWS services need in the policy of a key managed elsewhere (S3 notifications, CloudWatch Logs, Auto Scaling volumes): merge them into its key policy before the apply."
  value       = data.aws_iam_policy_document.services.json
}
