output "json" {
  description = "The worker's data access policy (queues, audio, transcripts, claims, keys, model repository), as JSON."
  value       = data.aws_iam_policy_document.this.json
}

output "scaler_json" {
  description = "What KEDA's aws-sqs-queue scaler needs (sqs:GetQueueAttributes on the queues), as JSON."
  value       = data.aws_iam_policy_document.scaler.json
}
