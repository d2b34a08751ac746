# Job control: the CANCELLED state (its retention index), cancel requests, snoozes, the cancel permission.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_jobq', '0004_rate_rest'),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='job',
            options={'ordering': ['-id'], 'permissions': [('requeue_job', 'Can requeue dead jobs'), ('pause_queue', 'Can pause and resume queues'), ('cancel_job', 'Can cancel queued and running jobs')]},
        ),
        migrations.RemoveIndex(
            model_name='job',
            name='jobq_job_finished',
        ),
        migrations.AddField(
            model_name='job',
            name='cancel_requested_at',
            field=models.DateTimeField(blank=True, help_text='When a cancel was asked of the job; a run it reaches ends CANCELLED.', null=True),
        ),
        migrations.AddField(
            model_name='job',
            name='cancelled_by',
            field=models.TextField(blank=True, help_text='Who asked for the cancel.', null=True),
        ),
        migrations.AddField(
            model_name='job',
            name='snoozes',
            field=models.IntegerField(db_default=0, help_text='Times its task raised Snooze (JOBQ["MAX_SNOOZES"]).'),
        ),
        migrations.AlterField(
            model_name='job',
            name='status',
            field=models.SmallIntegerField(choices=[(0, 'Pending'), (1, 'Running'), (2, 'Done'), (3, 'Dead'), (4, 'Cancelled')], default=0),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(condition=models.Q(('status__in', [2, 3, 4])), fields=['finished_at', 'status'], include=('queue',), name='jobq_job_finished'),
        ),
    ]
