output "queue_arns" {
  description = "Work queue ARNs by queue key."
  value       = { for k, q in aws_sqs_queue.main : k => q.arn }
}

output "queue_urls" {
  description = "Work queue URLs by queue key (the worker's FLEETSCRIBE_QUEUE_URL)."
  value       = { for k, q in aws_sqs_queue.main : k => q.id }
}

output "queue_names" {
  description = "Work queue names by queue key (CloudWatch QueueName dimension)."
  value       = { for k, q in aws_sqs_queue.main : k => q.name }
}

output "dlq_arns" {
  description = "Dead-letter queue ARNs by queue key."
  value       = { for k, q in aws_sqs_queue.dlq : k => q.arn }
}

output "dlq_names" {
  description = "Dead-letter queue names by queue key."
  value       = { for k, q in aws_sqs_queue.dlq : k => q.name }
}

output "visibility_timeout_seconds" {
  description = "Default visibility timeout of the work queues."
  value       = local.visibility_timeout
}

output "max_receive_count" {
  description = "Receives before dead-lettering; feed it to the worker's FLEETSCRIBE_MAX_RECEIVES."
  value       = var.max_receive_count
}
