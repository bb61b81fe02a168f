variable "name" {
  type        = string
  description = "Name of the Auto Scaling group, launch template and related resources."
}

variable "ami_ssm_parameter" {
  type        = string
  description = "SSM parameter holding the GPU AMI id (NVIDIA driver, Docker and the NVIDIA container toolkit installed). Resolved at every launch, so new instances follow the parameter."
  default     = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
}

variable "instance_types" {
  type        = list(string)
  description = "g6e sizes (L40S GPUs: 1 for xlarge to 16xlarge, 4 for 12xlarge and 24xlarge, 8 for 48xlarge); each instance runs partitions_per_gpu MPS partitions on every GPU it has. Without spot the group runs the first; with spot it mixes all of them, weighted by GPUs."
  default     = ["g6e.xlarge", "g6e.2xlarge"]

  validation {
    condition     = length(var.instance_types) > 0 && alltrue([for t in var.instance_types : contains(["g6e.xlarge", "g6e.2xlarge", "g6e.4xlarge", "g6e.8xlarge", "g6e.16xlarge", "g6e.12xlarge", "g6e.24xlarge", "g6e.48xlarge"], t)])
    error_message = "instance_types must be g6e sizes: g6e.xlarge, g6e.2xlarge, g6e.4xlarge, g6e.8xlarge, g6e.16xlarge (1 GPU), g6e.12xlarge, g6e.24xlarge (4 GPUs) or g6e.48xlarge (8 GPUs)."
  }
}

variable "partitions_per_gpu" {
  type        = number
  description = "MPS partitions (Triton servers) per GPU, each capped at worker mps plan's measured percentage (100 for one or two per GPU, 50 for more); 8 served the most on an H200 (docs/benchmarks.md): check GPU memory for 8 copies of the model on smaller GPUs."
  default     = 8

  validation {
    condition     = var.partitions_per_gpu >= 1 && var.partitions_per_gpu <= 48
    error_message = "partitions_per_gpu must be 1 to 48 (the MPS client limit per GPU)."
  }
}

variable "subnet_ids" {
  type        = list(string)
  description = "Private subnets, in several Availability Zones, for the group."

  validation {
    condition     = length(var.subnet_ids) > 0
    error_message = "Give at least one subnet."
  }
}

variable "security_group_ids" {
  type        = list(string)
  description = "Security groups for the instances. The worker needs egress to SQS, S3 (ideally through VPC endpoints) and the image registry only."
}

variable "instance_profile_name" {
  type        = string
  description = "Instance profile from the iam module."
}

variable "root_volume_size_gb" {
  type        = number
  description = "Root volume size; holds the Triton and worker images and model weights."
  default     = 200
}

variable "ebs_kms_key_arn" {
  type        = string
  description = "KMS key for the root volume. Null uses the account's default EBS key; the volume is encrypted either way."
  default     = null
}

variable "min_size" {
  type        = number
  description = "Fewest GPUs (capacity is counted in GPUs, so sizes with 1, 4 and 8 GPUs mix). 0 lets the fleet scale to nothing when the queues are empty."
  default     = 0

  validation {
    condition     = var.min_size >= 0
    error_message = "min_size cannot be negative."
  }
}

variable "max_size" {
  type        = number
  description = "Most GPUs (an 8-GPU instance counts 8)."
}

variable "queue_names" {
  type        = list(string)
  description = "Names of the queues the workers drain; the fleet scales on their combined backlog."

  validation {
    # Target tracking with metric math takes at most 10 metrics: two per
    # queue, the in-service count and the expression (2n + 2 <= 10). The
    # scale-from-zero alarm needs n + 2.
    condition     = length(var.queue_names) > 0 && length(var.queue_names) <= 4
    error_message = "queue_names takes 1 to 4 queues: target tracking on metric math allows at most 10 metrics (two per queue, the instance count and the expression)."
  }
}

variable "backlog_per_gpu_target" {
  type        = number
  description = "Messages per in-service GPU to hold. Choose SLA seconds x jobs per second one GPU completes (see the README)."
}

variable "scale_from_zero_capacity" {
  type        = number
  description = "GPUs to add when messages wait and the group's desired capacity is zero (added, never set: scaling from zero cannot lower capacity); rounded up to whole instances."
  default     = 1
}

variable "instance_warmup_seconds" {
  type        = number
  description = "Time from launch until an instance's work shows in the metrics (image pull, model load)."
  default     = 600
}

variable "job_timeout_seconds" {
  type        = number
  description = "The longest a job may run (the worker's FLEETSCRIBE_JOB_TIMEOUT, set from this; worker_environment must not set it)."
  default     = 1800
}

variable "drain_timeout_seconds" {
  type        = number
  description = "How long a terminating instance lets jobs in hand finish (the worker's FLEETSCRIBE_DRAIN_TIMEOUT); at least job_timeout_seconds, so no termination throws away a job that would have finished. Scale-in itself picks idle instances (the worker protects busy ones)."
  default     = 1800
}

variable "worker_environment" {
  type        = map(string)
  description = "Worker settings written to the instance's .env, by the worker's environment names: at least FLEETSCRIBE_QUEUE_URL, FLEETSCRIBE_OUTPUT_BUCKET and FLEETSCRIBE_INPUT_BUCKETS (the buckets jobs may read; * for any, on purpose)."

  validation {
    condition     = alltrue([for k in ["FLEETSCRIBE_QUEUE_URL", "FLEETSCRIBE_OUTPUT_BUCKET", "FLEETSCRIBE_INPUT_BUCKETS"] : trimspace(lookup(var.worker_environment, k, "")) != ""])
    error_message = "worker_environment needs FLEETSCRIBE_QUEUE_URL, FLEETSCRIBE_OUTPUT_BUCKET and FLEETSCRIBE_INPUT_BUCKETS (the worker refuses to start without an input allow-list; * accepts any bucket)."
  }
}

variable "bulk_queue_url" {
  type        = string
  description = "URL of the bulk queue; when set, the worker on each instance drains it after the live queue, with the same slots (live first, bulk keeps its minimum share)."
  default     = null
}

variable "compose_yaml" {
  type        = string
  description = "docker-compose.yml the instances run. Null uses the project's own file."
  default     = null
}

variable "spot" {
  type = object({
    enabled                                  = bool
    on_demand_base_capacity                  = optional(number, 0)
    on_demand_percentage_above_base_capacity = optional(number, 0)
    spot_allocation_strategy                 = optional(string, "price-capacity-optimized")
  })
  description = "Mixed spot/on-demand instances. Cannot be combined with a warm pool."
  default     = { enabled = false }
}

variable "warm_pool" {
  type = object({
    enabled                     = bool
    min_size                    = optional(number, 0)
    max_group_prepared_capacity = optional(number)
    pool_state                  = optional(string, "Stopped")
  })
  description = "Pre-initialised stopped instances for faster scale-out (on-demand only). Cannot be combined with spot. Instances are bootstrapped before they enter the pool and start their workers again on every boot (launch lifecycle hook)."
  default     = { enabled = false }

  validation {
    # A Running pool instance would already drain the queue while it waits.
    condition     = contains(["Stopped", "Hibernated"], var.warm_pool.pool_state)
    error_message = "warm_pool.pool_state must be Stopped or Hibernated: a Running pool instance takes jobs while still in the pool."
  }
}

variable "scheduled_scaling" {
  type = map(object({
    recurrence       = string
    min_size         = number
    max_size         = number
    desired_capacity = optional(number)
    time_zone        = optional(string, "UTC")
  }))
  description = "Scheduled capacity changes in GPUs, e.g. a larger floor for the overnight bulk window and a return to zero in the morning; keyed by action name."
  default     = {}
}

variable "tags" {
  type        = map(string)
  description = "Tags for the group, its instances and volumes."
  default     = {}
}
