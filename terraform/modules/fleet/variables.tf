variable "name" {
  type        = string
  description = "Name of the Auto Scaling group, launch template and related resources."
}

variable "ami_id" {
  type        = string
  description = "GPU AMI (NVIDIA driver, Docker and the NVIDIA container toolkit installed) every instance launches from. Null reads ami_ssm_parameter when Terraform plans: the AMI is pinned in the launch template until the next apply, which rolls the fleet if the parameter moved."
  default     = null

  validation {
    condition     = var.ami_id == null || can(regex("^ami-[0-9a-f]{8,17}$", var.ami_id))
    error_message = "ami_id must be an AMI id (ami-...), or null to read ami_ssm_parameter at plan time."
  }
}

variable "ami_ssm_parameter" {
  type        = string
  description = "SSM parameter read at plan time for the AMI when ami_id is null (never resolved at launch: a new AMI reaches the fleet only through an apply and its instance refresh)."
  default     = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
}

variable "instance_types" {
  type        = list(string)
  description = "g6e sizes (L40S GPUs: 1 for xlarge to 16xlarge, 4 for 12xlarge and 24xlarge, 8 for 48xlarge); each instance runs partitions_per_gpu MPS partitions on every GPU it has. The group is weighted by GPUs and takes them in order (on-demand: the first while it has capacity, the next when it has none; with spot, as spot.spot_allocation_strategy picks), so switching spot on or off never changes what capacity means; with a warm pool (no mixed instances policy) it runs the first."
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

variable "root_volume_iops" {
  type        = number
  description = "gp3 IOPS of the root volume. A cold boot pulls multi-GB Triton images and model weights onto it; gp3's baseline (3,000) makes that the slowest step of a boot."
  default     = 6000

  validation {
    condition     = var.root_volume_iops >= 3000 && var.root_volume_iops <= 16000
    error_message = "root_volume_iops must be 3000 to 16000 (gp3)."
  }
}

variable "root_volume_throughput" {
  type        = number
  description = "gp3 throughput of the root volume in MiB/s (baseline 125): at most a quarter of root_volume_iops."
  default     = 500

  validation {
    condition     = var.root_volume_throughput >= 125 && var.root_volume_throughput <= 1000
    error_message = "root_volume_throughput must be 125 to 1000 MiB/s (gp3)."
  }
}

variable "ebs_kms_key_arn" {
  type        = string
  description = "KMS key for the root volume. Null uses the account's default EBS key; the volume is encrypted either way."
  default     = null
}

variable "min_gpus" {
  type        = number
  description = "Fewest GPUs (capacity is counted in GPUs, so sizes with 1, 4 and 8 GPUs mix; an 8-GPU instance counts 8). 0 lets the fleet scale to nothing when the queues are empty."
  default     = 0

  validation {
    condition     = var.min_gpus >= 0
    error_message = "min_gpus cannot be negative."
  }
}

variable "max_gpus" {
  type        = number
  description = "Most GPUs (an 8-GPU instance counts 8: four g6e.48xlarge are 32)."
}

# Kept only to refuse the old name with a message.
# tflint-ignore: terraform_unused_declarations
variable "min_size" {
  type        = number
  description = "Renamed min_gpus: refused, since it counts GPUs, not instances."
  default     = null

  validation {
    condition     = var.min_size == null
    error_message = "min_size is now min_gpus: the fleet counts GPUs, not instances (four g6e.48xlarge are min_gpus = 32)."
  }
}

# Kept only to refuse the old name with a message.
# tflint-ignore: terraform_unused_declarations
variable "max_size" {
  type        = number
  description = "Renamed max_gpus: refused, since it counts GPUs, not instances."
  default     = null

  validation {
    condition     = var.max_size == null
    error_message = "max_size is now max_gpus: the fleet counts GPUs, not instances (four g6e.48xlarge are max_gpus = 32)."
  }
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
  description = "Messages per desired GPU to hold (launching capacity counts). Choose SLA seconds x jobs per second one GPU completes (see the README)."
}

variable "scale_from_zero_capacity" {
  type        = number
  description = "GPUs to add when messages wait and the group's desired capacity is zero (added, never set: scaling from zero cannot lower capacity); rounded up to whole instances."
  default     = 1
}

variable "instance_warmup_seconds" {
  type        = number
  description = "Time from an instance entering service until its work shows in the metrics (scaling and instance refresh warm-up)."
  default     = 300
}

variable "launch_heartbeat_timeout_seconds" {
  type        = number
  description = "The launch lifecycle hook's heartbeat timeout: the boot heartbeats the hook every minute while it pulls images and syncs the model, so a boot that hangs (or an instance that dies) is abandoned this long after its last sign of life."
  default     = 300

  validation {
    condition     = var.launch_heartbeat_timeout_seconds >= 180 && var.launch_heartbeat_timeout_seconds <= 7200
    error_message = "launch_heartbeat_timeout_seconds must be 180 to 7200: the boot heartbeats every 60 s."
  }
}

variable "boot_timeout_seconds" {
  type        = number
  description = "The longest a boot may take (image pulls onto the root volume, model sync, MPS plan) before it is abandoned and the group launches another instance. Separate from the hook's heartbeat timeout: a slow cold boot keeps heartbeating."
  default     = 2700
}

variable "unhealthy_after_seconds" {
  type        = number
  description = "An in-service instance whose worker is down or has no ready Triton partition for this long (checked every 30 s through the worker's /readyz?local=1) is marked unhealthy, and the group replaces it (through the drain). Queue reachability is not part of it: every instance shares it, and replacing the fleet would not help."
  default     = 300

  validation {
    condition     = var.unhealthy_after_seconds >= 60
    error_message = "unhealthy_after_seconds must be at least 60 (two checks)."
  }
}

variable "job_timeout_seconds" {
  type        = number
  description = "The longest a job may run (the worker's FLEETSCRIBE_JOB_TIMEOUT, set from this; worker_environment must not set it). At most 43,200 s: SQS keeps a message in hand 12 hours at most from its receive, however often its visibility is extended."
  default     = 1800
  validation {
    condition     = var.job_timeout_seconds >= 60 && var.job_timeout_seconds <= 43200
    error_message = "job_timeout_seconds must be 60 to 43200: SQS keeps a received message invisible 12 hours at most, so a longer job would be delivered again while it runs."
  }
}

variable "drain_timeout_seconds" {
  type        = number
  description = "How long a terminating instance lets jobs in hand finish (the worker's FLEETSCRIBE_DRAIN_TIMEOUT); at least job_timeout_seconds, so no termination throws away a job that would have finished. A scale-in terminates the instances the group picks, busy or not: they drain."
  default     = 1800
}

variable "jobs_per_gpu" {
  type        = number
  description = "Jobs each instance holds at once, per GPU it has (the worker's FLEETSCRIBE_CONCURRENCY is this times the GPUs, set by worker mps up; worker_environment must not set it). Also bounds the in-flight messages the scaling metric counts as work: a message parked in retry backoff is in flight but not being worked on."
  default     = 16

  validation {
    condition     = var.jobs_per_gpu >= 1
    error_message = "jobs_per_gpu must be at least 1."
  }
}

variable "queue_weights" {
  type        = map(number)
  description = "Weight of each queue's messages in the backlog per GPU, by queue name (missing: 1). A bulk queue at 0.1 lets a backfill fill idle GPUs and the bulk window's floor without scaling the fleet out by its full size in the daytime; 0 leaves it out of scaling."
  default     = {}

  validation {
    condition     = alltrue([for w in values(var.queue_weights) : w >= 0 && w <= 1])
    error_message = "queue_weights must be between 0 and 1."
  }
}

variable "floor_capped_queues" {
  type        = list(string)
  description = "Queues (names) that scale the fleet only while scheduled_scaling has raised its floor: outside that window (the group's minimum at min_gpus) their visible messages count at most min_gpus x backlog_per_gpu_target, so a daytime backfill fills idle GPUs and the floor, and never scales the fleet out nor starts it from zero; inside it they count as queue_weights says. The example gives its bulk queue when bulk_window is on."
  default     = []

  validation {
    condition     = length(var.floor_capped_queues) <= 3
    error_message = "floor_capped_queues takes at most 3 queues: the group's minimum is one more of target tracking's 10 metrics."
  }
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
    enabled           = bool
    min_gpus          = optional(number, 1)
    max_prepared_gpus = optional(number)
    pool_state        = optional(string, "Stopped")
    # The old names, refused with a message (they counted instances).
    min_size                    = optional(number)
    max_group_prepared_capacity = optional(number)
  })
  description = "Stopped instances prepared in advance (images pulled, model copied, stack not started) for faster scale-out; on-demand only. Sizes in GPUs, rounded up to instances: min_gpus in the pool, max_prepared_gpus (in service plus pool; default min_gpus, so the pool holds min_gpus' worth, not max_gpus')."
  default     = { enabled = false }

  validation {
    # A Running pool instance would drain the queue while it waits; g6e
    # instances cannot hibernate.
    condition     = var.warm_pool.pool_state == "Stopped"
    error_message = "warm_pool.pool_state must be Stopped: a Running pool instance would take jobs while in the pool, and g6e instances cannot hibernate."
  }
  validation {
    condition     = var.warm_pool.min_gpus >= 0 && (var.warm_pool.max_prepared_gpus == null || coalesce(var.warm_pool.max_prepared_gpus, 0) >= var.warm_pool.min_gpus)
    error_message = "warm_pool.min_gpus must be at least 0, and max_prepared_gpus at least min_gpus."
  }
  validation {
    condition     = var.warm_pool.min_size == null && var.warm_pool.max_group_prepared_capacity == null
    error_message = "warm_pool.min_size and max_group_prepared_capacity are now min_gpus and max_prepared_gpus: the fleet counts GPUs (one g6e.48xlarge in the pool is min_gpus = 8)."
  }
}

variable "scheduled_scaling" {
  type = map(object({
    recurrence   = string
    min_gpus     = number
    max_gpus     = number
    desired_gpus = optional(number)
    time_zone    = optional(string, "UTC")
    # The old names, refused with a message (they counted instances).
    min_size         = optional(number)
    max_size         = optional(number)
    desired_capacity = optional(number)
  }))
  description = "Scheduled capacity changes in GPUs (min_gpus, max_gpus, desired_gpus), e.g. a larger floor for the overnight bulk window and a return to zero in the morning; keyed by action name."
  default     = {}

  validation {
    condition     = alltrue([for a in values(var.scheduled_scaling) : a.min_size == null && a.max_size == null && a.desired_capacity == null])
    error_message = "scheduled_scaling's min_size, max_size and desired_capacity are now min_gpus, max_gpus and desired_gpus: the fleet counts GPUs (four g6e.48xlarge are max_gpus = 32)."
  }
}

variable "tags" {
  type        = map(string)
  description = "Tags for the group, its instances and volumes, on top of the provider's default_tags (which the launch template also gives instances and volumes: Auto Scaling launches them, not Terraform)."
  default     = {}
}

variable "log_group_name" {
  type        = string
  description = "CloudWatch Logs group the module creates for the instances' containers; null is /fleetscribe/NAME."
  default     = null
}

variable "log_retention_days" {
  type        = number
  description = "Days the CloudWatch log group of the instances' containers keeps their logs (the worker logs job ids and error classes, never transcript text or audio)."
  default     = 30
}

variable "log_kms_key_arn" {
  type        = string
  description = "KMS key for the log group; null uses CloudWatch Logs' own encryption. The key policy must let logs.<region>.amazonaws.com use it."
  default     = null
}

variable "alarm_actions" {
  type        = list(string)
  description = "SNS topic ARNs notified when boots fail or launches fall short."
  default     = []
}

variable "refresh_stop_alarm_names" {
  type        = list(string)
  description = "Further CloudWatch alarms that stop an instance refresh when they fire, on top of the fleet's own boot-failure, launch-shortfall and never-in-service alarms; at most 7 (an instance refresh takes 10 alarms)."
  default     = []

  validation {
    condition     = length(var.refresh_stop_alarm_names) <= 7
    error_message = "refresh_stop_alarm_names: at most 7 (an instance refresh takes at most 10 alarms, and the fleet adds its boot-failure, launch-shortfall and never-in-service alarms); more would plan and fail the first refresh mid-apply."
  }
}

variable "allow_public_images" {
  type        = bool
  description = "Allow WORKER_IMAGE, TRITON_IMAGE and CUDA_IMAGE outside ECR (or unset: public defaults). Off by default: anonymous Docker Hub pulls are limited per address, and a scale-out of many instances behind one NAT exhausts them mid-boot."
  default     = false
}

variable "launch_shortfall_minutes" {
  type        = number
  description = "Minutes desired capacity may exceed what is in service or launching before the launch-shortfall alarm fires."
  default     = 15

  validation {
    condition     = var.launch_shortfall_minutes >= 2 && var.launch_shortfall_minutes <= 60
    error_message = "launch_shortfall_minutes must be 2 to 60."
  }
}

variable "launch_template_version" {
  type        = number
  description = "The launch template version the fleet runs: the release proven good. null: the newest, so an apply that changes the template starts a refresh to it at once (a stopped refresh leaves the group on it: undo with fleetctl undo, the README's \"Undo\"). Pinned, a template change stays off the fleet until it is set to the new version (launch_template_latest_version), after a canary."
  default     = null

  validation {
    condition     = var.launch_template_version == null ? true : var.launch_template_version >= 1
    error_message = "launch_template_version is a launch template version number (1 or more), or null for the newest."
  }
}

variable "canary" {
  type = object({
    version        = number
    instances      = optional(number, 1)
    failure_margin = optional(number, 0.05)
    min_jobs       = optional(number, 20)
  })
  description = "A canary: this launch template version (usually launch_template_latest_version) on a group of its own beside the fleet (NAME-canary, instances instances, taking real jobs), while the fleet stays on launch_template_version. Its alarms notify alarm_actions: boot failures, never in service, job failures (in 15 minutes, at least min_jobs jobs and a failed or retried share more than failure_margin above the fleet's, which takes jobs from the same queues) and dead letters (a message reaching dead_letter_queue_names while it runs). Promote by setting launch_template_version to its version once none has fired; abort by removing it: the fleet never ran it. null: no canary."
  default     = null

  validation {
    condition     = var.canary == null ? true : var.canary.version >= 1 && var.canary.instances >= 1 && var.canary.instances <= 10
    error_message = "canary: version is a launch template version (1 or more), instances 1 to 10."
  }
  validation {
    condition     = var.canary == null ? true : var.canary.failure_margin > 0 && var.canary.failure_margin < 1 && var.canary.min_jobs >= 1
    error_message = "canary: failure_margin is a share above the fleet's (between 0 and 1, e.g. 0.05), min_jobs at least 1."
  }
}

variable "dead_letter_queue_names" {
  type        = list(string)
  description = "Dead-letter queues of the queues the fleet drains (the queues module's dlq_names): while a canary runs, a message reaching any of them fires NAME-canary-dead-letters. Empty: no such alarm."
  default     = []
}
