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

variable "instance_types" {
  type        = list(string)
  description = "g6e sizes for the fleet (1, 4 or 8 GPUs each); see the fleet module."
  default     = ["g6e.xlarge", "g6e.2xlarge"]
}

variable "max_gpus" {
  type        = number
  description = "Largest fleet size, in GPUs."
  default     = 8
}

variable "backlog_per_gpu_target" {
  type        = number
  description = "Messages per desired GPU to hold (launching capacity counts): SLA seconds x jobs/s per GPU from the GPU benchmark."
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
  description = "SNS topics the alarms notify. Empty: the example creates one, {name}-alarms, which alarm_email subscribes to."
  default     = []
}

variable "alarm_email" {
  type        = string
  description = "An address subscribed to the alarms topic the example creates (it confirms by mail). Required when alarm_topic_arns is empty: alarms that notify nobody (a boot loop, a DLQ filling) go unseen."
  default     = null

  validation {
    condition     = length(var.alarm_topic_arns) > 0 || var.alarm_email != null
    error_message = "Give alarm_topic_arns (topics someone reads) or alarm_email (subscribed to a topic the example creates): the fleet's alarms (failed boots, launches that never serve, DLQ, queue age) would notify nobody."
  }
}

variable "worker_image" {
  type        = string
  description = "Worker container image the instances run, in ECR (ACCOUNT.dkr.ecr.REGION.amazonaws.com/...)."
}

variable "triton_image" {
  type        = string
  description = "The GPU Triton image (deploy/triton/Dockerfile: Triton 2.51.0 with NeMo pinned by hash; make triton-image) pushed to your ECR."
}

variable "cuda_image" {
  type        = string
  description = "CUDA base image of the MPS control daemon (nvidia/cuda:12.4.1-base-ubuntu22.04) mirrored into ECR, or an ECR pull-through cache of Docker Hub: anonymous Docker Hub pulls are limited per NAT address."
}

variable "ami_id" {
  type        = string
  description = "GPU AMI to pin; null pins the fleet module's SSM parameter as read at plan time."
  default     = null
}

variable "model_kms_key_arn" {
  type        = string
  description = "KMS key of the model repository's objects, when they are encrypted with one other than kms_key_arn."
  default     = null
}

variable "encrypt_volumes_with_kms_key" {
  type        = bool
  description = "Encrypt the instances' root volumes with the project's key instead of the account's default EBS key. The key policy then names the Auto Scaling service-linked role, which must exist before the apply (see the kms module)."
  default     = false
}

variable "session_manager" {
  type        = bool
  description = "Session Manager access to the instances (its agent's own permissions, not AmazonSSMManagedInstanceCore)."
  default     = true
}

variable "ecr_repository_arns" {
  type        = list(string)
  description = "ECR repositories of the worker and Triton images, if they live in ECR."
  default     = []
}

variable "ecr_pull_through_prefixes" {
  type        = list(string)
  description = "Repository prefixes of ECR pull-through cache rules the images come through (such as docker-hub for the CUDA image)."
  default     = []
}

variable "bulk_window" {
  type = object({
    enabled     = bool
    start_cron  = optional(string, "0 22 * * *")
    end_cron    = optional(string, "0 6 * * *")
    min_gpus    = optional(number, 2)
    time_zone   = optional(string, "UTC")
    bulk_weight = optional(number, 0.1)
  })
  description = "Raise the fleet's floor overnight for bulk reprocessing; bulk messages then count bulk_weight each in the backlog, so a daytime backfill does not scale the fleet out in full."
  default     = { enabled = false }
}

variable "tags" {
  type        = map(string)
  description = "Tags applied to every resource."
  default     = {}
}

variable "queues" {
  type        = set(string)
  description = "Work queues, each with its DLQ. \"live\" takes upload events and \"bulk\" backfills; at most 4 in all (the scaling policy's metric limit)."
  default     = ["live", "bulk"]

  validation {
    condition     = contains(var.queues, "live") && contains(var.queues, "bulk")
    error_message = "queues must include \"live\" and \"bulk\"."
  }
  validation {
    condition     = length(var.queues) <= 4
    error_message = "At most 4 queues: the fleet's target tracking policy on metric math allows at most 10 metrics (two per queue, the instance count and the expression)."
  }
}

variable "kms_key_arn" {
  type        = string
  description = "Customer managed KMS key for the buckets, queues and log group (and volumes, with encrypt_volumes_with_kms_key). Null creates one with the key policy they need; a supplied key's policy must hold the statements in the output kms_key_policy_statements."
  default     = null
}

variable "spot" {
  type = object({
    enabled                                  = bool
    on_demand_base_capacity                  = optional(number, 0)
    on_demand_percentage_above_base_capacity = optional(number, 0)
    spot_allocation_strategy                 = optional(string, "price-capacity-optimized")
  })
  description = "Spot instances for the fleet (see the fleet module)."
  default     = { enabled = false }
}

variable "warm_pool" {
  type = object({
    enabled           = bool
    min_gpus          = optional(number, 1)
    max_prepared_gpus = optional(number)
    pool_state        = optional(string, "Stopped")
  })
  description = "Warm pool of prepared, stopped instances, in GPUs (min_gpus, max_prepared_gpus; see the fleet module)."
  default     = { enabled = false }

  validation {
    condition     = var.warm_pool.pool_state == "Stopped"
    error_message = "warm_pool.pool_state must be Stopped: a Running pool instance would take jobs while in the pool, and g6e instances cannot hibernate."
  }
  validation {
    condition     = !(var.warm_pool.enabled && var.spot.enabled)
    error_message = "A warm pool cannot be used with spot instances: enable one of warm_pool and spot, not both."
  }
}

variable "model_repository_s3_uri" {
  type        = string
  description = "s3://bucket/prefix/ holding the Triton model repository (asr/config.pbtxt, asr/1/...). Instances copy it at every boot; without it Triton would start with no model."
}

variable "launch_template_version" {
  type        = number
  description = "The launch template version the fleet runs (the fleet module's launch_template_version): null, the newest; pinned, a change reaches the fleet only when this is set to its version, after a canary."
  default     = null
}

variable "canary" {
  type = object({
    version   = number
    instances = optional(number, 1)
  })
  description = "A canary group on this launch template version beside the pinned fleet (the fleet module's canary); null: none."
  default     = null
}
