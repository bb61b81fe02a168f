variable "name_prefix" {
  type        = string
  description = "Prefix of every queue name, e.g. \"fleetscribe-prod\"."
}

variable "queues" {
  type        = set(string)
  description = "Queues to create, each with its own dead-letter queue. \"live\" takes upload events, \"bulk\" takes backfills and reprocessing."
  default     = ["live", "bulk"]
}

variable "max_receive_count" {
  type        = number
  description = "Receives before a message moves to its DLQ. Set the worker's FLEETSCRIBE_MAX_RECEIVES to the same value."
  default     = 5

  validation {
    condition     = var.max_receive_count >= 1 && var.max_receive_count <= 1000
    error_message = "max_receive_count must be between 1 and 1000."
  }
}

variable "worker_max_job_seconds" {
  type        = number
  description = "Longest a job may take (the worker's FLEETSCRIBE_JOB_TIMEOUT). The queue's visibility timeout is this plus visibility_margin_seconds, so a message is never redelivered while a live worker may still hold it, even if its heartbeats stop reaching SQS."
  default     = 1800
}

variable "visibility_margin_seconds" {
  type        = number
  description = "Added to worker_max_job_seconds for the queue's default visibility timeout."
  default     = 120
}

variable "message_retention_seconds" {
  type        = number
  description = "How long an unprocessed message is kept in a work queue."
  default     = 345600 # 4 days
}

variable "dlq_message_retention_seconds" {
  type        = number
  description = "How long a dead-lettered message is kept; longer than the work queues so failures can be inspected and redriven."
  default     = 1209600 # 14 days, the SQS maximum
}

variable "receive_wait_time_seconds" {
  type        = number
  description = "Default long-poll wait for receives that do not set their own."
  default     = 20
}

variable "kms_key_arn" {
  type        = string
  description = "Customer managed KMS key for queue encryption. Null uses SQS-managed encryption (SSE-SQS). With a key, its policy must let s3.amazonaws.com use it for bucket notifications."
  default     = null
}

variable "kms_data_key_reuse_period_seconds" {
  type        = number
  description = "How long SQS reuses a data key before calling KMS again (with kms_key_arn)."
  default     = 300
}

variable "tags" {
  type        = map(string)
  description = "Tags for every queue."
  default     = {}
}
