variable "input_bucket_name" {
  type        = string
  description = "Name of the bucket that receives audio uploads."
}

variable "output_bucket_name" {
  type        = string
  description = "Name of the bucket for transcripts and error records. May equal input_bucket_name to use prefixes of one bucket."
}

variable "output_prefix" {
  type        = string
  description = "Key prefix of transcripts and error records (the worker's FLEETSCRIBE_OUTPUT_PREFIX)."
  default     = "transcripts/"
}

variable "kms_key_arn" {
  type        = string
  description = "KMS key for SSE-KMS, with create_kms_key = false."
  default     = null
}

variable "create_kms_key" {
  type        = bool
  description = "Create a dedicated key with rotation enabled (true), or use kms_key_arn. A flag rather than kms_key_arn == null, so a key created in the same apply (unknown at plan) can be passed."
  default     = true
}

variable "error_record_expiration_days" {
  type        = number
  description = "Days after which error records (objects tagged fleetscribe-record=error) expire."
  default     = 90
}

variable "noncurrent_version_expiration_days" {
  type        = number
  description = "Days after which overwritten object versions expire."
  default     = 30
}

variable "force_destroy" {
  type        = bool
  description = "Allow destroying buckets that still hold objects. Keep false in production: transcripts are medical records."
  default     = false
}

variable "tags" {
  type        = map(string)
  description = "Tags for every resource."
  default     = {}
}
