output "input_bucket_name" {
  description = "Input bucket name."
  value       = aws_s3_bucket.this[var.input_bucket_name].id
}

output "input_bucket_arn" {
  description = "Input bucket ARN."
  value       = aws_s3_bucket.this[var.input_bucket_name].arn
}

output "output_bucket_name" {
  description = "Output bucket name (the worker's FLEETSCRIBE_OUTPUT_BUCKET)."
  value       = aws_s3_bucket.this[var.output_bucket_name].id
}

output "output_bucket_arn" {
  description = "Output bucket ARN."
  value       = aws_s3_bucket.this[var.output_bucket_name].arn
}

output "output_prefix" {
  description = "Key prefix of transcripts and error records."
  value       = var.output_prefix
}

output "kms_key_arn" {
  description = "KMS key that encrypts both buckets."
  value       = local.kms_arn
}
