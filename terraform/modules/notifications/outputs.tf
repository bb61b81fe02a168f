output "notification_ids" {
  description = "Ids of the bucket notification configurations."
  value       = [for q in aws_s3_bucket_notification.this.queue : q.id]
}
