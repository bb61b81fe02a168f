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
