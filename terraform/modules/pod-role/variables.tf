variable "name" {
  type        = string
  description = "Name of the worker pods' role."
}

variable "namespace" {
  type        = string
  description = "Kubernetes namespace of the Helm release."
}

variable "service_account" {
  type        = string
  description = "The release's service account (the chart's serviceAccount.name, or its full name: <release>-fleetscribe)."
}

variable "oidc_provider_arn" {
  type        = string
  description = "ARN of the cluster's IAM OIDC provider, for IRSA; null for Pod Identity alone."
  default     = null

  validation {
    condition     = var.oidc_provider_arn == null || can(regex("^arn:[^:]+:iam::[0-9]{12}:oidc-provider/.+$", var.oidc_provider_arn))
    error_message = "oidc_provider_arn must be an IAM OIDC provider ARN (arn:aws:iam::<account>:oidc-provider/<issuer>)."
  }
}

variable "pod_identity_cluster_name" {
  type        = string
  description = "EKS cluster to create a Pod Identity association in (the EKS Pod Identity Agent add-on must run there); null for IRSA alone."
  default     = null
}

variable "permissions_boundary_arn" {
  type        = string
  description = "Optional permissions boundary for the role."
  default     = null
}

variable "tags" {
  type        = map(string)
  description = "Tags for the role and the association."
  default     = {}
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

variable "model_repository_s3_uri" {
  type        = string
  description = "s3://bucket/prefix/ of the Triton model repository that workers copy at start (read access is granted); null grants none."
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
