output "live_queue_url" {
  description = "Queue that upload events feed."
  value       = module.queues.queue_urls["live"]
}

output "bulk_queue_url" {
  description = "Queue for enqueue backfills and reprocessing."
  value       = module.queues.queue_urls["bulk"]
}

output "output_bucket" {
  description = "Where transcripts land."
  value       = module.buckets.output_bucket_name
}

output "autoscaling_group_name" {
  description = "Worker Auto Scaling group."
  value       = module.fleet.autoscaling_group_name
}

output "kms_key_policy_statements" {
  description = "Key policy statements the services need (S3 notifications, CloudWatch Logs, Auto Scaling volumes): with kms_key_arn supplied, merge them into that key's policy before the apply."
  value       = module.kms.service_statements_json
}

output "kms_key_arn" {
  description = "The key of the buckets, queues and log group."
  value       = local.kms_key_arn
}

output "log_group_name" {
  description = "CloudWatch Logs group of the instances' containers."
  value       = module.fleet.log_group_name
}

output "alarm_topic_arns" {
  description = "SNS topics the alarms notify."
  value       = local.alarm_topic_arns
}

output "canary" {
  description = "The canary's group and its alarms (null without one)."
  value       = module.fleet.canary
}

output "fleet_launch_template_version" {
  description = "The launch template version the fleet runs."
  value       = module.fleet.fleet_launch_template_version
}

output "user_data_bytes" {
  description = "Bytes of the fleet's user data that count against EC2's 16 KB (gzipped)."
  value       = module.fleet.user_data_bytes
}
