variable "bucket_name" {
  type        = string
  description = "Bucket whose uploads are transcribed."
}

variable "bucket_arn" {
  type        = string
  description = "ARN of that bucket; the queue policy admits messages from it alone."
}

variable "queue_arn" {
  type        = string
  description = "ARN of the live queue that receives ObjectCreated events."
}

variable "queue_url" {
  type        = string
  description = "URL of the live queue (for its queue policy)."
}

variable "filter_prefix" {
  type        = string
  description = "Only keys under this prefix are sent, e.g. \"incoming/\". Must not overlap the output prefix when input and output share a bucket."
  default     = ""
}

variable "filter_suffixes" {
  type        = list(string)
  description = "One notification per suffix (S3 filters take one suffix each)."
  default     = [".wav"]

  validation {
    condition     = length(var.filter_suffixes) > 0
    error_message = "Give at least one suffix; use [\"\"] for every key."
  }
}
