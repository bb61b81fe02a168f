# What cluster-autoscaler needs to scale a GPU node group up from zero for
# a fleetscribe plan. With no node to look at, it builds one from the
# instance type and these tags of the group: the labels GPU feature
# discovery puts on a running node (the chart's pods require them), the
# nvidia.com/gpu replicas the device plugin will advertise (its instance
# type table knows physical GPUs only), and the node group's taint. Without
# them a pending pod fits no template node and the group stays at zero.
locals {
  template = "k8s.io/cluster-autoscaler/node-template"
  # The chart's node affinity: GPU feature discovery's sharing label for
  # each plan sharing (an mps pod runs its own daemon on GPUs the device
  # plugin does not share).
  strategy = { "mps" = "none", "device-plugin-mps" = "mps", "device-plugin-timeslicing" = "time-slicing" }[var.sharing]
  replicas = var.sharing == "mps" ? 1 : coalesce(var.replicas_per_gpu, 0)

  tags = merge(
    {
      "${local.template}/label/nvidia.com/gpu.count"            = tostring(var.gpus)
      "${local.template}/label/nvidia.com/gpu.sharing-strategy" = local.strategy
      "${local.template}/resources/nvidia.com/gpu"              = tostring(var.gpus * local.replicas)
    },
    var.gpu_taint ? { "${local.template}/taint/nvidia.com/gpu" = "true:NoSchedule" } : {},
    var.cluster_name == null ? {} : { "k8s.io/cluster-autoscaler/enabled" = "true", "k8s.io/cluster-autoscaler/${var.cluster_name}" = "owned" },
  )
}

# Tags of the group only: the running nodes get their labels from GPU
# feature discovery, not from these.
resource "aws_autoscaling_group_tag" "this" {
  for_each = { for p in setproduct(var.autoscaling_group_names, keys(local.tags)) : "${p[0]}/${p[1]}" => { group = p[0], key = p[1] } }

  autoscaling_group_name = each.value.group

  tag {
    key                 = each.value.key
    value               = local.tags[each.value.key]
    propagate_at_launch = false
  }

  lifecycle {
    precondition {
      condition     = var.sharing == "mps" || var.replicas_per_gpu != null
      error_message = "replicas_per_gpu is required for the device-plugin plans: the replicas per GPU the device plugin's sharing config advertises."
    }
  }
}
