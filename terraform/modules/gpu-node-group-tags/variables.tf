variable "autoscaling_group_names" {
  type        = list(string)
  description = "Auto Scaling groups of the EKS GPU node group that runs one Helm plan (a managed node group's resources[0].autoscaling_groups[*].name, or a self-managed group's name)."
}

variable "cluster_name" {
  type        = string
  description = "EKS cluster name, for cluster-autoscaler's auto-discovery tags (k8s.io/cluster-autoscaler/enabled and k8s.io/cluster-autoscaler/NAME); null leaves them to you."
  default     = null
}

variable "gpus" {
  type        = number
  description = "GPUs of the node group's instance types: the plan's GPU count (1, 4 or 8; g6e.xlarge to 16xlarge have 1, 12xlarge and 24xlarge 4, 48xlarge 8)."

  validation {
    condition     = contains([1, 4, 8], var.gpus)
    error_message = "gpus is the GPU count of a g6e size and of a Helm plan: 1, 4 or 8."
  }
}

variable "sharing" {
  type        = string
  description = "The plan's sharing (the chart's plan.sharing): mps (the pod's own MPS daemon on whole GPUs), device-plugin-mps or device-plugin-timeslicing."

  validation {
    condition     = contains(["mps", "device-plugin-mps", "device-plugin-timeslicing"], var.sharing)
    error_message = "sharing is mps, device-plugin-mps or device-plugin-timeslicing (the chart's plan.sharing)."
  }
}

variable "replicas_per_gpu" {
  type        = number
  description = "nvidia.com/gpu replicas the device plugin advertises per GPU (its sharing config's replicas), for the device-plugin plans; at least the plan's partitions per GPU (8, or 4 for time slicing). Ignored for mps (whole GPUs)."
  default     = null

  validation {
    condition     = var.replicas_per_gpu == null ? true : var.replicas_per_gpu >= 1
    error_message = "replicas_per_gpu is the device plugin's replicas per GPU, 1 or more."
  }
}

variable "gpu_taint" {
  type        = bool
  description = "Whether the node group taints its nodes nvidia.com/gpu=true:NoSchedule (EKS GPU node groups usually do; the chart tolerates it): cluster-autoscaler must know the taint of a node it has not launched."
  default     = true
}
