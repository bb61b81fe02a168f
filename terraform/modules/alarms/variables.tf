variable "name_prefix" {
  type        = string
  description = "Prefix of alarm names."
}

variable "queue_names" {
  type        = map(string)
  description = "Work queue names by key (queues module output queue_names)."
}

variable "dlq_names" {
  type        = map(string)
  description = "Dead-letter queue names by key (queues module output dlq_names)."
}

variable "autoscaling_group_name" {
  type        = string
  description = "Worker Auto Scaling group."
}

variable "oldest_message_sla_seconds" {
  type        = map(number)
  description = "Alarm when a queue's oldest message is older than this, by queue key. Queues not listed use default_oldest_message_sla_seconds."
  default     = {}
}

variable "default_oldest_message_sla_seconds" {
  type        = number
  description = "Age-of-oldest-message threshold for queues without their own."
  default     = 3600
}

variable "no_capacity_minutes" {
  type        = number
  description = "Alarm when messages have waited this long with no instance in service (scale-from-zero failed: quota, capacity, AMI)."
  default     = 15
}

variable "wait_for_window" {
  type        = list(string)
  description = "Queue keys whose messages may wait with no instance in service (the fleet's floor_capped_queues: a daytime backfill waits for the scheduled window): the backlog-without-instances alarm leaves them out; their oldest-message alarm still watches them."
  default     = []
}

variable "alarm_actions" {
  type        = list(string)
  description = "SNS topic ARNs notified on alarm and recovery."
  default     = []
}

variable "tags" {
  type        = map(string)
  description = "Tags for every alarm."
  default     = {}
}
