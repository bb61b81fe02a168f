variable "name" {
  type        = string
  description = "Name of the worker instance role and profile."
}

variable "queue_arns" {
  type        = list(string)
  description = "Queues the worker drains."
}

variable "input_bucket_arn" {
  type        = string
  description = "ARN of the input bucket."
}

variable "input_prefixes" {
  type        = list(string)
  description = "Key prefixes the worker may read under; [\"\"] for the whole bucket."
  default     = [""]
}

variable "output_bucket_arn" {
  type        = string
  description = "ARN of the output bucket."
}

variable "output_prefix" {
  type        = string
  description = "Key prefix the worker writes transcripts and error records under."
}

variable "kms_key_arns" {
  type        = list(string)
  description = "KMS keys of the buckets (and of the queues, when they use a customer managed key)."
  default     = []
}

variable "autoscaling_group_name" {
  type        = string
  description = "Name of the worker Auto Scaling group; lifecycle, protection and health calls are allowed on it alone."
}

variable "ecr_repository_arns" {
  type        = list(string)
  description = "ECR repositories the instance pulls images from; empty when images come from elsewhere."
  default     = []
}

variable "ecr_pull_through_prefixes" {
  type        = list(string)
  description = "Repository prefixes of ECR pull-through cache rules the instance pulls images through (such as docker-hub): a tag not cached yet is imported from upstream (ecr:BatchImportUpstreamImage), and an image's first pull creates its repository (ecr:CreateRepository), within these prefixes alone."
  default     = []

  validation {
    condition     = alltrue([for p in var.ecr_pull_through_prefixes : can(regex("^[a-z0-9][a-z0-9._/-]*$", trim(p, "/")))])
    error_message = "ecr_pull_through_prefixes: each a cache rule's repository prefix (lower-case letters, digits, . _ - /), such as docker-hub."
  }
}

variable "permissions_boundary_arn" {
  type        = string
  description = "Optional permissions boundary for the role."
  default     = null
}

variable "tags" {
  type        = map(string)
  description = "Tags for the role and profile."
  default     = {}
}

variable "model_repository_s3_uri" {
  type        = string
  description = "s3://bucket/prefix/ of the Triton model repository that instances copy at boot (read access is granted); null grants none."
  default     = null

  validation {
    condition     = var.model_repository_s3_uri == null || can(regex("^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/(.+/)?$", var.model_repository_s3_uri))
    error_message = "model_repository_s3_uri must look like s3://bucket/ or s3://bucket/prefix/."
  }
}

variable "model_kms_key_arn" {
  type        = string
  description = "KMS key the model repository's objects are encrypted with, when it is not one of kms_key_arns; null grants none."
  default     = null
}

variable "log_group_name" {
  type        = string
  description = "CloudWatch Logs group the instances' containers write to (the fleet module's log_group_name output); null grants no logging."
  default     = null
}

variable "metric_namespace" {
  type        = string
  description = "CloudWatch namespace the instances publish boot failures in (the fleet module's metric_namespace output)."
  default     = "fleetscribe"
}

variable "session_manager" {
  type        = bool
  description = "Session Manager shells on the instances (no SSH or inbound rules): the agent's registration and session channels alone (ssm:UpdateInstanceInformation, ssmmessages:*Channel), not AmazonSSMManagedInstanceCore, which would let every container read every SSM parameter. Needs a route to the ssm and ssmmessages endpoints."
  default     = true
}
