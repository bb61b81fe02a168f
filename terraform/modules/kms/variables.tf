variable "name" {
  type        = string
  description = "Alias of the key (alias/NAME) and its description."
}

variable "create_key" {
  type        = bool
  description = "Create the key with the policy below. False only renders the statements (service_statements_json) for a key whose policy is managed elsewhere."
  default     = true
}

variable "input_bucket_arn" {
  type        = string
  description = "Bucket whose upload notifications S3 delivers to queues encrypted with the key (S3 needs the key to send, and sends a test message when the notification is created)."
}

variable "log_group_name" {
  type        = string
  description = "CloudWatch Logs group encrypted with the key (the fleet's); null grants CloudWatch Logs nothing."
  default     = null
}

variable "encrypt_volumes" {
  type        = bool
  description = "Let the Auto Scaling service-linked role (AWSServiceRoleForAutoScaling, which must exist: it is created with the account's first Auto Scaling group, or by `aws iam create-service-linked-role --aws-service-name autoscaling.amazonaws.com`) use the key for the instances' root volumes. Without it a launch with an encrypted volume fails."
  default     = false
}

variable "deletion_window_in_days" {
  type        = number
  description = "Waiting period before a deleted key is gone (7 to 30)."
  default     = 30
}

variable "tags" {
  type        = map(string)
  description = "Tags for the key."
  default     = {}
}
