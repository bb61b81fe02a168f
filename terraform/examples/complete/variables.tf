variable "region" {
  type        = string
  description = "AWS region to deploy into."
}

variable "name" {
  type        = string
  description = "Name prefix for every resource, e.g. \"fleetscribe-prod\"."
}

variable "vpc_id" {
  type        = string
  description = "VPC of the worker instances."
}

variable "private_subnet_ids" {
  type        = list(string)
  description = "Private subnets (several Availability Zones) for the instances."
}

variable "input_bucket_name" {
  type        = string
  description = "Bucket that receives audio uploads."
}

variable "output_bucket_name" {
  type        = string
  description = "Bucket for transcripts and error records."
}

variable "upload_prefix" {
  type        = string
  description = "Uploads under this prefix are transcribed automatically."
  default     = "incoming/"
}

variable "upload_suffixes" {
  type        = list(string)
  description = "File suffixes that trigger transcription."
  default     = [".wav"]
}

variable "max_instances" {
  type        = number
  description = "Largest fleet size."
  default     = 8
}

variable "backlog_per_instance_target" {
  type        = number
  description = "Messages per in-service instance to hold: SLA seconds x jobs/s per instance from the GPU benchmark."
  default     = 600
}

variable "max_job_seconds" {
  type        = number
  description = "Longest a job may take; sets the worker's job timeout and the queues' visibility timeout."
  default     = 1800
}

variable "max_receive_count" {
  type        = number
  description = "Receives before a message is dead-lettered."
  default     = 5
}

variable "alarm_topic_arns" {
  type        = list(string)
  description = "SNS topics for alarms."
  default     = []
}

variable "worker_image" {
  type        = string
  description = "Worker container image the instances run."
}

variable "ecr_repository_arns" {
  type        = list(string)
  description = "ECR repositories of the worker and Triton images, if they live in ECR."
  default     = []
}

variable "bulk_window" {
  type = object({
    enabled       = bool
    start_cron    = optional(string, "0 22 * * *")
    end_cron      = optional(string, "0 6 * * *")
    min_instances = optional(number, 2)
    time_zone     = optional(string, "UTC")
  })
  description = "Raise the fleet's floor overnight for bulk reprocessing."
  default     = { enabled = false }
}

variable "tags" {
  type        = map(string)
  description = "Tags applied to every resource."
  default     = {}
}
