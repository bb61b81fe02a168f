output "alarm_arns" {
  description = "ARNs of every alarm."
  value = concat(
    [for a in aws_cloudwatch_metric_alarm.dlq_not_empty : a.arn],
    [for a in aws_cloudwatch_metric_alarm.oldest_message : a.arn],
    [aws_cloudwatch_metric_alarm.no_capacity.arn],
  )
}

output "no_capacity_queues" {
  description = "The queues whose waiting messages, with no instance in service, fire the backlog-without-instances alarm (all but wait_for_window)."
  value       = sort(keys(local.queue_ids))
}
